// The prefill path of the CUDA plugins that keep packed weights
// (linear.cuda_int4, linear.cuda_lut4): the activations rounded to bf16
// once, then the weight dequantized to bf16 a slice of output channels at a
// time, each slice multiplied by cuBLASLt into its columns of y. Decode
// takes the plugins' own GEMVs instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cuda/convert.hpp"
#include "plugins/quant_common/cuda_lt_matmul.hpp"

namespace llmk::cuda_quant {

constexpr int64_t kDefaultPrefillWeights = int64_t{16} << 20;  // dequantized bf16 weights per slice

// The "prefill_channels" option: output channels per slice (default: a
// slice of kDefaultPrefillWeights weights), at most out_features.
inline int64_t prefill_channels_option(const nlohmann::json& options, const llmk_linear_desc& d) {
  int64_t channels = std::max<int64_t>(1, kDefaultPrefillWeights / d.in_features);
  if (options.contains("prefill_channels")) {
    const auto& v = options["prefill_channels"];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  layer_name(d) + ": option prefill_channels must be a positive integer, got " + v.dump());
    channels = v.get<int64_t>();
  }
  return std::min<int64_t>(channels, d.out_features);
}

class SlicedPrefill {
 public:
  SlicedPrefill(int64_t in_features, int64_t out_features, int64_t channels)
      : in_(in_features), out_(out_features), channels_(channels) {}

  size_t workspace_bytes(uint32_t rows) const { return x_bytes(rows) + slice_bytes() + kLtWorkspaceBytes; }

  // y[rows, out] = x[rows, in] W^T, with dequantize(c0, count, w_bf16, stream)
  // writing channels [c0, c0 + count) of W as bf16 rows ("what" names it in errors).
  template <class Dequantize>
  void run(const float* x, float* y, uint32_t rows, void* workspace, cudaStream_t stream, Dequantize&& dequantize,
           const std::string& what) {
    auto* ws = static_cast<unsigned char*>(workspace);
    auto* x_bf16 = reinterpret_cast<__nv_bfloat16*>(ws);
    auto* w_bf16 = reinterpret_cast<__nv_bfloat16*>(ws + x_bytes(rows));
    void* lt_workspace = ws + x_bytes(rows) + slice_bytes();
    check_cuda(cuda::convert_f32_to_bf16(x, x_bf16, rows * in_, stream), "rounding the activations to bf16");
    for (int64_t c0 = 0; c0 < out_; c0 += channels_) {
      const int64_t count = std::min(channels_, out_ - c0);
      check_cuda(dequantize(c0, count, w_bf16, stream), "dequantizing " + what);
      lt_.run(CUDA_R_16BF, w_bf16, in_, x_bf16, in_, y + c0, out_, count, rows, in_, lt_workspace, stream);
    }
  }

 private:
  size_t x_bytes(uint32_t rows) const { return align_up(static_cast<size_t>(rows) * in_ * 2); }
  size_t slice_bytes() const { return align_up(static_cast<size_t>(channels_ * in_) * 2); }

  int64_t in_, out_, channels_;
  LtMatmul lt_;
};

}  // namespace llmk::cuda_quant
