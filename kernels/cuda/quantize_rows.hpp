// Symmetric quantization of f32 activation rows for the quantized GEMMs:
// int8 (W8A8) and FP8 E4M3.
//
//   int8: scale = amax / 127, q = clamp(rint(x * 127 / amax), -127, 127)
//         (|x - q scale| <= scale / 2 for every element)
//   fp8:  scale = amax / 448, q = e4m3(x * 448 / amax), rounded to nearest
//         and saturated to +-448 (relative error <= 2^-4 for normals,
//         absolute <= scale * 2^-10 in the subnormal range)
//
// amax is the row's largest |x| (per token) or, when tensor_amax is given,
// the largest over all rows (per tensor); an all-zero row gets scale 0 and
// q = 0. Columns in_features..k_pad of q are written as zero, so a GEMM may
// run over k_pad.
//
// Launch: one block of kQuantizeThreads per row; row_absmax likewise. All
// pointers are device pointers. Neither allocates nor synchronizes.
#pragma once

#include <cstdint>

#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int kQuantizeThreads = 256;

// x: [num_rows, in_features] -> amax: [num_rows], each row's largest |x|.
cudaError_t row_absmax(const float* x, int64_t num_rows, int64_t in_features, float* amax, cudaStream_t stream);

// x: [num_rows, in_features] -> q: [num_rows, k_pad], scale: [num_rows].
// tensor_amax: null for per-row scales, else [num_rows] row maxima (row_absmax)
// reduced to one scale shared by every row.
cudaError_t quantize_rows_i8(const float* x, int64_t num_rows, int64_t in_features, int64_t k_pad,
                             const float* tensor_amax, int8_t* q, float* scale, cudaStream_t stream);
cudaError_t quantize_rows_fp8(const float* x, int64_t num_rows, int64_t in_features, int64_t k_pad,
                              const float* tensor_amax, __nv_fp8_e4m3* q, float* scale, cudaStream_t stream);

}  // namespace llmk::cuda
