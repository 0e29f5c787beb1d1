// linear.cuda_int8: W8A8 on a CUDA device, the scheme of the CPU's
// linear.int8 (kernels/cpu/linear_w8a8.hpp) without its unsigned shift.
//
// create() quantizes the weight on the host once, symmetric per output
// channel: w_scale[n] = max_k |w[n, k]| / 127, wq = clamp(rint(w / w_scale),
// -127, 127), stored [out_features, k_pad] int8 (k_pad = in_features rounded
// up to 16, zero-padded) and uploaded with the scales. forward() enqueues two
// kernels on the caller's stream: per-token symmetric quantization of x into
// the workspace (kernels/cuda/quantize_rows.hpp), then the int8 GEMM with the
// dequantization y = acc * x_scale[r] * w_scale[n] in its epilogue
// (kernels/cuda/gemm_w8a8.hpp). Nothing is allocated or synchronized per call.
//
// Why an own kernel and not cuBLASLt's int8: cuBLASLt's IMMA path writes an
// int32 (or requantized int8) D that a second kernel would have to read back
// to apply per-token and per-channel scales, and its int8 layouts carry their
// own alignment rules; the dp4a kernel fuses the scales, runs the same on
// sm_80 and sm_90a, and is race-checked in the simulation. At prefill sizes it
// is slower than BF16 tensor cores (docs/cuda_kernels.md); its gain is the
// halved weight traffic of decode.
//
// No options. The same source builds against the CUDA toolkit (the shipped
// plugin) and against the CUDA simulation (tests/cudasim_plugins).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_w8a8.hpp"
#include "kernels/cuda/quantize_rows.hpp"
#include "plugins/quant_common/cuda_quant_common.hpp"

namespace llmk::cuda_quant {

namespace {

// 127^2 * k must fit an int32 accumulator.
constexpr uint32_t kMaxInFeatures = 133000;

int64_t k_pad_of(uint32_t in_features) { return (static_cast<int64_t>(in_features) + 15) / 16 * 16; }

}  // namespace

class LinearCudaInt8 {
 public:
  static constexpr const char* kName = "linear.cuda_int8";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA W8A8: int8 weights per output channel, int8 activations per token, int32 dp4a accumulation";
  static constexpr const char* kCapabilities =
      R"({"devices":["cuda"],"weight_dtypes":["f32","f16","bf16"],"activation_dtypes":["f32"],"scheme":"w8a8","options":{}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!check_cuda_desc(d, why)) return false;
    if (d.in_features > kMaxInFeatures) {
      why = "in_features " + std::to_string(d.in_features) + " exceeds " + std::to_string(kMaxInFeatures) +
            " (the int32 accumulator could overflow)";
      return false;
    }
    try {
      check_option_keys(parse_options(d), {}, d);
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearCudaInt8(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), k_pad_(k_pad_of(d.in_features)),
        max_rows_(std::max<uint32_t>(1, d.max_rows)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": " + why);
    const std::vector<float> w = weight_as_f32(d);
    std::vector<int8_t> q(static_cast<size_t>(out_ * k_pad_), 0);
    std::vector<float> scale(static_cast<size_t>(out_));
    for (int64_t n = 0; n < out_; ++n) {
      const float* row = w.data() + n * in_;
      float amax = 0.0f;
      for (int64_t k = 0; k < in_; ++k) amax = std::max(amax, std::fabs(row[k]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;  // as the activation kernel rounds
      for (int64_t k = 0; k < in_; ++k)
        q[n * k_pad_ + k] = static_cast<int8_t>(std::clamp(std::rint(row[k] * inv), -127.0f, 127.0f));
      scale[n] = amax / 127.0f;
    }
    wq_ = upload_array(q, layer_name(d) + "'s int8 weight");
    w_scale_ = upload_array(scale, layer_name(d) + "'s weight scales");
  }

  // Quantized rows, then their scales.
  size_t workspace_bytes(uint32_t rows) const { return align_up(rows * static_cast<size_t>(k_pad_)) + align_up(rows * 4u); }

  void forward(const void* x, void* y, uint32_t rows, void* workspace, void* stream_ptr) {
    if (rows == 0) return;
    if (rows > max_rows_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  std::to_string(rows) + " rows exceed the layer's max_rows " + std::to_string(max_rows_));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    auto* xq = static_cast<int8_t*>(workspace);
    auto* x_scale = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + align_up(rows * static_cast<size_t>(k_pad_)));
    check_cuda(cuda::quantize_rows_i8(static_cast<const float*>(x), rows, in_, k_pad_, nullptr, xq, x_scale, stream),
               "quantizing the activations");
    check_cuda(cuda::gemm_w8a8(xq, x_scale, rows, wq_.as<int8_t>(), w_scale_.as<float>(), out_, k_pad_,
                               static_cast<float*>(y), stream),
               "the int8 GEMM");
  }

  size_t weight_bytes() const { return wq_.bytes() + w_scale_.bytes(); }

 private:
  int64_t in_, out_, k_pad_;
  uint32_t max_rows_;
  DeviceBuffer wq_;       // [out_features, k_pad] int8
  DeviceBuffer w_scale_;  // [out_features] f32
};

}  // namespace llmk::cuda_quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::cuda_quant::LinearCudaInt8)
