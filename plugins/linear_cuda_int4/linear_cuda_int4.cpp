// linear.cuda_int4: weight-only int4 on a CUDA device, in the CPU's
// linear.int4 scheme (kernels/cpu/linear_w4.hpp), so the same error bound
// applies: groups of group_size inputs per output channel, asymmetric with
// an integer zero point, the range fitted by the CPU's own w4_fit_group
// ("mse" or "min_max"). create() fits and packs on the host once and uploads
// the packed weight, scales and zero points (layout in kernels/cuda/gemm_w4.hpp).
//
// forward() enqueues on the caller's stream:
// - up to kW4GemvMaxRows rows (decode): one dequantizing GEMV kernel that
//   reads the packed weight once, activations in f32;
// - more rows (prefill): x rounded to bf16 in the workspace, then per slice
//   of prefill_channels output channels the slice dequantized to bf16 in the
//   workspace and one cuBLASLt BF16 GEMM (F32 accumulation) into y's columns.
// Nothing is allocated or synchronized per call.
//
// Options: {"group_size": 128, "range": "mse", "prefill_channels": N}.
// group_size is capped at in_features, otherwise a multiple of 8;
// prefill_channels (default: as many as make 16 Mi weights) bounds the
// workspace of a prefill: more channels, fewer launches, more scratch.
// The same source builds against the CUDA toolkit (the shipped plugin) and
// against the CUDA simulation (tests/cudasim_plugins).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/linear_w4.hpp"
#include "kernels/cuda/gemm_w4.hpp"
#include "plugins/quant_common/cuda_sliced_prefill.hpp"

namespace llmk::cuda_quant {

namespace {

struct Int4Options {
  int64_t group_size = 128;
  kernels::cpu::W4Range range = kernels::cpu::W4Range::mse;
  int64_t prefill_channels = 0;
};

int64_t positive_int_option(const nlohmann::json& options, const char* key, int64_t fallback,
                            const llmk_linear_desc& d) {
  if (!options.contains(key)) return fallback;
  const auto& v = options[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    throw Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": option " + key + " must be a positive integer, got " +
                                               v.dump());
  return v.get<int64_t>();
}

Int4Options options_of(const llmk_linear_desc& d) {
  const nlohmann::json options = parse_options(d);
  check_option_keys(options, {"group_size", "range", "prefill_channels"}, d);
  Int4Options o;
  const int64_t group = positive_int_option(options, "group_size", 128, d);
  o.group_size = std::min<int64_t>(group, d.in_features);
  if (o.group_size % 8 != 0 && o.group_size < d.in_features)
    throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": group_size " + std::to_string(group) +
                                          " must be a multiple of 8 or at least in_features (" +
                                          std::to_string(d.in_features) + ")");
  o.range = choice_option(options, "range", "mse", {"mse", "min_max"}, d) == "mse" ? kernels::cpu::W4Range::mse
                                                                                 : kernels::cpu::W4Range::min_max;
  o.prefill_channels = prefill_channels_option(options, d);
  return o;
}

}  // namespace

class LinearCudaInt4 {
 public:
  static constexpr const char* kName = "linear.cuda_int4";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA weight-only int4: groups along in_features with scales and zero points (the CPU's scheme); "
      "a dequantizing GEMV for decode, dequantize to bf16 + cuBLASLt for prefill";
  static constexpr const char* kCapabilities =
      R"({"devices":["cuda"],"weight_dtypes":["f32","f16","bf16"],"activation_dtypes":["f32"],"scheme":"w4a32","options":{"group_size":128,"range":["mse","min_max"],"prefill_channels":"16Mi / in_features"}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!check_cuda_desc(d, why)) return false;
    try {
      options_of(d);
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearCudaInt4(const llmk_linear_desc& d) : max_rows_(std::max<uint32_t>(1, d.max_rows)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": " + why);
    const Int4Options o = options_of(d);
    shape_ = {d.in_features, d.out_features, o.group_size};
    const std::vector<float> w = weight_as_f32(d);
    const int64_t in = shape_.in_features, k_words = shape_.k_words(), num_groups = shape_.num_groups();
    std::vector<uint32_t> packed(static_cast<size_t>(shape_.out_features * k_words), 0u);
    std::vector<float> scale(static_cast<size_t>(shape_.out_features * num_groups));
    std::vector<uint8_t> zero(scale.size());
    for (int64_t n = 0; n < shape_.out_features; ++n)
      for (int64_t g = 0; g < num_groups; ++g) {
        const int64_t k0 = g * shape_.group_size, k1 = std::min(in, k0 + shape_.group_size);
        const float* row = w.data() + n * in;
        const kernels::cpu::W4Group fit = kernels::cpu::w4_fit_group(row + k0, k1 - k0, o.range);
        scale[n * num_groups + g] = fit.scale;
        zero[n * num_groups + g] = fit.zero;
        const double sc = fit.scale, z = fit.zero;
        for (int64_t k = k0; k < k1; ++k) {  // rounded as pack_w4 rounds
          const double q = sc > 0.0 ? std::clamp(std::nearbyint(row[k] / sc) + z, 0.0, 15.0) : z;
          packed[n * k_words + k / 8] |= static_cast<uint32_t>(q) << (4 * (k % 8));
        }
      }
    packed_ = upload_array(packed, layer_name(d) + "'s int4 weight");
    scale_ = upload_array(scale, layer_name(d) + "'s group scales");
    zero_ = upload_array(zero, layer_name(d) + "'s zero points");
    if (max_rows_ > cuda::kW4GemvMaxRows)
      prefill_ = std::make_unique<SlicedPrefill>(d.in_features, d.out_features, o.prefill_channels);
  }

  // Decode needs none; prefill: bf16 activations, a bf16 weight slice, cuBLASLt's own.
  size_t workspace_bytes(uint32_t rows) const {
    if (rows <= cuda::kW4GemvMaxRows) return 0;
    return prefill_->workspace_bytes(rows);
  }

  void forward(const void* x_in, void* y_in, uint32_t rows, void* workspace, void* stream_ptr) {
    if (rows == 0) return;
    if (rows > max_rows_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  std::to_string(rows) + " rows exceed the layer's max_rows " + std::to_string(max_rows_));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_in);
    const auto* packed = packed_.as<uint32_t>();
    const auto* scale = scale_.as<float>();
    const auto* zero = zero_.as<uint8_t>();
    if (rows <= cuda::kW4GemvMaxRows) {
      check_cuda(cuda::w4_gemv(x, rows, shape_, packed, scale, zero, y, stream), "the int4 GEMV");
      return;
    }
    prefill_->run(
        x, y, rows, workspace, stream,
        [&](int64_t c0, int64_t count, __nv_bfloat16* w, cudaStream_t s) {
          return cuda::w4_dequantize_bf16(shape_, packed, scale, zero, c0, count, w, s);
        },
        "the int4 weight");
  }

  size_t weight_bytes() const { return packed_.bytes() + scale_.bytes() + zero_.bytes(); }

 private:
  uint32_t max_rows_;
  cuda::W4DeviceShape shape_;
  DeviceBuffer packed_;  // [out_features, k_words] uint32, 8 nibbles a word
  DeviceBuffer scale_;   // [out_features, num_groups] f32
  DeviceBuffer zero_;    // [out_features, num_groups] u8
  std::unique_ptr<SlicedPrefill> prefill_;  // only with max_rows above the GEMV's
};

}  // namespace llmk::cuda_quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::cuda_quant::LinearCudaInt4)
