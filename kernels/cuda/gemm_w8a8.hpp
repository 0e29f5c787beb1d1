// W8A8 GEMM with the dequantization fused into its epilogue:
//   y[r, n] = (sum_k xq[r, k] wq[n, k]) * x_scale[r] * w_scale[n]
// int8 x int8 products summed exactly in int32 (|acc| <= 127^2 k, which fits
// for k < 133,000), then one f32 multiply per output.
//
// Layouts: xq [num_rows, k_pad] and wq [out_features, k_pad], both int8 with k
// contiguous and zero past in_features; k_pad a multiple of 16 (rows start on
// 16 bytes). x_scale [num_rows], w_scale [out_features], y [num_rows,
// out_features] f32. All device pointers, xq and wq 16-byte aligned.
//
// The kernel is a shared-memory tiled GEMM over 4-byte words with __dp4a
// (4 int8 products and their sum per instruction, sm_61+): 256 threads, each
// computing a 2x4 (prefill, > kW8A8SmallRows rows) or 1x1 (decode) block of
// outputs, so a decode step still spreads the weight over out_features / 16
// blocks. It neither allocates nor synchronizes.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int64_t kW8A8SmallRows = 16;  // up to this many rows: 16 x 16 output tiles

cudaError_t gemm_w8a8(const int8_t* xq, const float* x_scale, int64_t num_rows, const int8_t* wq,
                      const float* w_scale, int64_t out_features, int64_t k_pad, float* y, cudaStream_t stream);

}  // namespace llmk::cuda
