// linear.cuda_fp8: E4M3 weights and activations through cuBLASLt's FP8
// tensor-core path (compute capability 8.9+: Ada, Hopper).
//
// create() quantizes the weight on the host once: scale = amax / 448 per
// output channel ("weight_scale": "channel", the default) or one for the
// tensor ("tensor"); wq = e4m3(w / scale), stored [out_pad, k_pad] with both
// dimensions rounded up to 16 and zero-padded (cuBLASLt's FP8 alignment).
// forward() enqueues on the caller's stream: x quantized to E4M3 in the
// workspace with one scale per token ("activation_scale": "token", the
// default) or one for the whole step ("tensor", from the rows' maxima,
// kernels/cuda/quantize_rows.hpp); then one cuBLASLt FP8 matmul, F32 output.
// Per-tensor scales go to cuBLASLt's A/B scale pointers; per-channel and
// per-token ones (which those pointers cannot express) are applied by a
// scaling epilogue (kernels/cuda/scale_rows_cols.hpp) reading cuBLASLt's
// output from the workspace. With both scales per tensor and out_features a
// multiple of 16, cuBLASLt writes y directly. Nothing is allocated or
// synchronized per call. The capabilities' "scheme": "fp8_e4m3" is what the
// conformance suite bounds the error by: both operands rounded to E4M3, each
// scaled by its own maximum.
//
// The same source builds against the CUDA toolkit (the shipped plugin) and
// against the CUDA simulation (tests/cudasim_plugins).
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/quantize_rows.hpp"
#include "kernels/cuda/scale_rows_cols.hpp"
#include "plugins/quant_common/cuda_lt_matmul.hpp"

namespace llmk::cuda_quant {

namespace {

constexpr float kE4M3Max = 448.0f;

struct Fp8Options {
  bool weight_per_channel = true;
  bool activation_per_token = true;
};

Fp8Options options_of(const llmk_linear_desc& d) {
  const nlohmann::json options = parse_options(d);
  check_option_keys(options, {"weight_scale", "activation_scale"}, d);
  Fp8Options o;
  o.weight_per_channel = choice_option(options, "weight_scale", "channel", {"channel", "tensor"}, d) == "channel";
  o.activation_per_token = choice_option(options, "activation_scale", "token", {"token", "tensor"}, d) == "token";
  return o;
}

// Why the current device cannot run FP8 matmuls ("" if it can).
std::string device_refusal() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot read the CUDA device's compute capability";
  }
  if (major * 10 + minor < 89)
    return "FP8 matmuls need compute capability 8.9 or newer (Ada, Hopper); device " + std::to_string(device) +
           " is " + std::to_string(major) + "." + std::to_string(minor);
  return "";
}

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

class LinearCudaFp8 {
 public:
  static constexpr const char* kName = "linear.cuda_fp8";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA FP8 (E4M3) weights and activations through cuBLASLt, per-tensor or per-channel/per-token scales "
      "(compute capability 8.9+)";
  static constexpr const char* kCapabilities =
      R"({"devices":["cuda"],"min_compute_capability":"8.9","weight_dtypes":["f32","f16","bf16"],"activation_dtypes":["f32"],"scheme":"fp8_e4m3","options":{"weight_scale":["channel","tensor"],"activation_scale":["token","tensor"]}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (!check_cuda_desc(d, why)) return false;
    try {
      options_of(d);
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
    why = device_refusal();
    return why.empty();
  }

  explicit LinearCudaFp8(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), k_pad_(round16(d.in_features)), out_pad_(round16(d.out_features)),
        max_rows_(std::max<uint32_t>(1, d.max_rows)), options_(options_of(d)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": " + why);
    const std::vector<float> w = weight_as_f32(d);
    std::vector<float> scale(options_.weight_per_channel ? static_cast<size_t>(out_) : 1, 0.0f);
    for (int64_t n = 0; n < out_; ++n)
      for (int64_t k = 0; k < in_; ++k) {
        float& amax = scale[options_.weight_per_channel ? n : 0];
        amax = std::max(amax, std::fabs(w[n * in_ + k]));
      }
    std::vector<__nv_fp8_e4m3> q(static_cast<size_t>(out_pad_ * k_pad_), __nv_fp8_e4m3(0.0f));
    for (int64_t n = 0; n < out_; ++n) {
      const float amax = scale[options_.weight_per_channel ? n : 0];
      const float inv = amax > 0.0f ? kE4M3Max / amax : 0.0f;  // as the activation kernel rounds
      for (int64_t k = 0; k < in_; ++k) q[n * k_pad_ + k] = __nv_fp8_e4m3(w[n * in_ + k] * inv);
    }
    for (float& s : scale) s /= kE4M3Max;
    wq_ = upload_array(q, layer_name(d) + "'s FP8 weight");
    w_scale_ = upload_array(scale, layer_name(d) + "'s weight scales");
  }

  // Quantized rows, the rows' maxima, their scales, cuBLASLt's output when an
  // epilogue follows, and cuBLASLt's own workspace.
  size_t workspace_bytes(uint32_t rows) const {
    return align_up(static_cast<size_t>(rows) * k_pad_) + 2 * align_up(rows * size_t{4}) + acc_bytes(rows) +
           kLtWorkspaceBytes;
  }

  void forward(const void* x_in, void* y_in, uint32_t rows, void* workspace, void* stream_ptr) {
    if (rows == 0) return;
    if (rows > max_rows_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  std::to_string(rows) + " rows exceed the layer's max_rows " + std::to_string(max_rows_));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    const auto* x = static_cast<const float*>(x_in);
    auto* y = static_cast<float*>(y_in);
    auto* ws = static_cast<unsigned char*>(workspace);
    auto* xq = reinterpret_cast<__nv_fp8_e4m3*>(ws);
    ws += align_up(static_cast<size_t>(rows) * k_pad_);
    auto* row_amax = reinterpret_cast<float*>(ws);
    ws += align_up(rows * size_t{4});
    auto* x_scale = reinterpret_cast<float*>(ws);
    ws += align_up(rows * size_t{4});
    auto* acc = reinterpret_cast<float*>(ws);
    void* lt_workspace = ws + acc_bytes(rows);

    if (!options_.activation_per_token)
      check_cuda(cuda::row_absmax(x, rows, in_, row_amax, stream), "the activations' maxima");
    check_cuda(cuda::quantize_rows_fp8(x, rows, in_, k_pad_, options_.activation_per_token ? nullptr : row_amax, xq,
                                       x_scale, stream),
               "quantizing the activations to FP8");
    // Per-tensor scales ride on cuBLASLt's scale pointers (every row's x_scale is the same).
    lt_.set_scales(options_.weight_per_channel ? nullptr : w_scale_.as<float>(),
                   options_.activation_per_token ? nullptr : x_scale);
    if (!needs_epilogue()) {
      lt_.run(CUDA_R_8F_E4M3, wq_.as<void>(), k_pad_, xq, k_pad_, y, out_, out_pad_, rows, k_pad_, lt_workspace,
              stream);
      return;
    }
    lt_.run(CUDA_R_8F_E4M3, wq_.as<void>(), k_pad_, xq, k_pad_, acc, out_pad_, out_pad_, rows, k_pad_, lt_workspace,
            stream);
    check_cuda(cuda::scale_rows_cols(acc, out_pad_, options_.activation_per_token ? x_scale : nullptr,
                                     options_.weight_per_channel ? w_scale_.as<float>() : nullptr, rows, out_, y,
                                     stream),
               "the FP8 scaling epilogue");
  }

  size_t weight_bytes() const { return wq_.bytes() + w_scale_.bytes(); }

 private:
  bool needs_epilogue() const {
    return options_.weight_per_channel || options_.activation_per_token || out_pad_ != out_;
  }
  size_t acc_bytes(uint32_t rows) const {
    return needs_epilogue() ? align_up(static_cast<size_t>(rows) * out_pad_ * 4) : 0;
  }

  int64_t in_, out_, k_pad_, out_pad_;
  uint32_t max_rows_;
  Fp8Options options_;
  DeviceBuffer wq_;       // [out_pad, k_pad] E4M3
  DeviceBuffer w_scale_;  // [out_features] (per channel) or [1] f32
  LtMatmul lt_;
};

}  // namespace llmk::cuda_quant

LLMK_EXPORT_LINEAR_PLUGIN(llmk::cuda_quant::LinearCudaFp8)
