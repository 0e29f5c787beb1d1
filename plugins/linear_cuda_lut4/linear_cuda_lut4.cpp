// linear.cuda_lut4: lookup-table 4-bit weights on a CUDA device, in the CPU's
// linear.lut4 scheme and layout (kernels/cpu/linear_lut4.hpp): NF4 or IQ4_NL
// codebook, a scale per block, quantized on the host at create by the CPU's
// own quantizer (or a GGUF file's IQ4_NL blocks, regrouped), then uploaded.
//
// forward() enqueues on the caller's stream:
// - up to kLut4GemvMaxRows rows (decode): one GEMV kernel that reads the
//   packed weight once, looks each index up in the codebook (shared memory)
//   and multiplies with f32 activations;
// - more rows (prefill): x rounded to bf16 in the workspace, then per slice
//   of prefill_channels output channels the slice dequantized to bf16 in the
//   workspace and one cuBLASLt BF16 GEMM (F32 accumulation) into y's columns.
// Nothing is allocated or synchronized per call.
//
// Options: {"codebook": "iq4_nl", "block_size": 32, "scale": "search",
// "prefill_channels": N}: the first three as linear.lut4's (defaults block
// 64 and absmax for nf4); prefill_channels (default: as many as make 16 Mi
// weights) bounds the workspace of a prefill.
// The same source builds against the CUDA toolkit (the shipped plugin) and
// against the CUDA simulation (tests/cudasim_plugins).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/linear_lut4.hpp"
#include "kernels/cuda/gemm_lut4.hpp"
#include "plugins/quant_common/cuda_sliced_prefill.hpp"

namespace llmk::cuda_quant {

namespace {

constexpr uint32_t kIq4NlDtype = LLMK_DTYPE_GGML_BASE + 20;    // ggml type id of IQ4_NL

struct Lut4Options {
  kernels::cpu::Lut4Book book = kernels::cpu::Lut4Book::iq4_nl;
  int64_t block_size = 32;
  kernels::cpu::Lut4Scale scale = kernels::cpu::Lut4Scale::search;
  int64_t prefill_channels = 0;
};

Lut4Options options_of(const llmk_linear_desc& d) {
  using namespace kernels::cpu;
  const nlohmann::json options = parse_options(d);
  check_option_keys(options, {"codebook", "block_size", "scale", "prefill_channels"}, d);
  Lut4Options o;
  const bool nf4 = choice_option(options, "codebook", "iq4_nl", {"iq4_nl", "nf4"}, d) == "nf4";
  o.book = nf4 ? Lut4Book::nf4 : Lut4Book::iq4_nl;
  o.block_size = nf4 ? 64 : 32;
  if (options.contains("block_size")) {
    const auto& b = options["block_size"];
    if (!b.is_number_integer() || !Lut4Shape{32, 1, b.get<int64_t>()}.valid())
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  layer_name(d) + ": option block_size must be 32 or a multiple of 64 up to 4096, got " + b.dump());
    o.block_size = b.get<int64_t>();
  }
  o.scale = choice_option(options, "scale", nf4 ? "absmax" : "search", {"absmax", "search"}, d) == "absmax"
                ? Lut4Scale::absmax
                : Lut4Scale::search;
  o.prefill_channels = prefill_channels_option(options, d);
  if (d.weight_dtype == kIq4NlDtype) {  // the blocks carry their codebook and block size
    o.book = Lut4Book::iq4_nl;
    o.block_size = 32;
  }
  return o;
}

}  // namespace

class LinearCudaLut4 {
 public:
  static constexpr const char* kName = "linear.cuda_lut4";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA lookup-table 4-bit weights (NF4 or IQ4_NL codebook, block scales; GGUF IQ4_NL as stored): a "
      "table-lookup GEMV for decode, dequantize to bf16 + cuBLASLt for prefill";
  static constexpr const char* kCapabilities =
      R"({"devices":["cuda"],"weight_dtypes":["f32","f16","bf16","ggml:IQ4_NL"],"activation_dtypes":["f32"],"scheme":"lut4","options":{"codebook":"iq4_nl","block_size":32,"scale":"search","activations":"f32","prefill_channels":"16Mi / in_features"}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (d.weight_dtype == kIq4NlDtype) {
      llmk_linear_desc f = d;  // the same checks with a float weight
      f.weight_dtype = LLMK_DTYPE_F32;
      if (!check_cuda_desc(f, why)) return false;
      if (d.in_features % 32 != 0) {
        why = layer_name(d) + ": in_features " + std::to_string(d.in_features) + " is not a whole number of IQ4_NL blocks";
        return false;
      }
    } else if (!check_cuda_desc(d, why)) {
      return false;
    }
    try {
      options_of(d);
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearCudaLut4(const llmk_linear_desc& d) : max_rows_(std::max<uint32_t>(1, d.max_rows)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": " + why);
    const Lut4Options o = options_of(d);
    const kernels::cpu::Lut4Shape host{d.in_features, d.out_features, o.block_size};
    shape_ = {d.in_features, d.out_features, host.f16_scales(),
              o.book == kernels::cpu::Lut4Book::nf4 ? cuda::Lut4Codebook::nf4 : cuda::Lut4Codebook::iq4_nl};
    std::vector<uint8_t> packed(kernels::cpu::lut4_size(host));
    if (d.weight_dtype == kIq4NlDtype) {
      kernels::cpu::pack_lut4_iq4_nl(d.weight, host, packed.data(), 1);
    } else {
      const std::vector<float> w = weight_as_f32(d);
      std::vector<uint8_t> q(w.size());
      std::vector<float> scale(static_cast<size_t>(host.out_features * host.num_blocks()));
      kernels::cpu::quantize_lut4(w.data(), host, o.book, o.scale, q.data(), scale.data(), 1);
      kernels::cpu::pack_lut4(q.data(), scale.data(), host, packed.data());
    }
    packed_ = upload_array(packed, layer_name(d) + "'s lut4 weight");
    if (max_rows_ > cuda::kLut4GemvMaxRows)
      prefill_ = std::make_unique<SlicedPrefill>(d.in_features, d.out_features, o.prefill_channels);
  }

  // Decode needs none; prefill: bf16 activations, a bf16 weight slice, cuBLASLt's own.
  size_t workspace_bytes(uint32_t rows) const {
    if (rows <= cuda::kLut4GemvMaxRows) return 0;
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
    const auto* packed = packed_.as<uint8_t>();
    if (rows <= cuda::kLut4GemvMaxRows) {
      check_cuda(cuda::lut4_gemv(x, rows, shape_, packed, y, stream), "the lut4 GEMV");
      return;
    }
    prefill_->run(
        x, y, rows, workspace, stream,
        [&](int64_t c0, int64_t count, __nv_bfloat16* w, cudaStream_t s) {
          return cuda::lut4_dequantize_bf16(shape_, packed, c0, count, w, s);
        },
        "the lut4 weight");
  }

  size_t weight_bytes() const { return packed_.bytes(); }

 private:
  uint32_t max_rows_;
  cuda::Lut4DeviceShape shape_;
  DeviceBuffer packed_;  // [out_features, num_units] units of 36 bytes
  std::unique_ptr<SlicedPrefill> prefill_;  // only with max_rows above the GEMV's
};

}  // namespace llmk::cuda_quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::cuda_quant::LinearCudaLut4)
