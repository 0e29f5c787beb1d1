// Element conversions of device arrays between f32 and the 16-bit formats:
// activations to a GEMM's input dtype and its output back. Rounding is to
// nearest even, as the CPU engine's kernels/cpu/convert.hpp; f32 values
// beyond the largest half become infinity; NaN stays NaN.
//
// Launch: a grid-stride loop, 256 threads per block, at most
// kConvertMaxBlocks blocks. n == 0 launches nothing. All pointers are device
// pointers; src and dst must not overlap.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int kConvertThreads = 256;
constexpr int64_t kConvertMaxBlocks = 4096;

// src: [n] f32 -> dst: [n] bf16.
cudaError_t convert_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream);
// src: [n] bf16 -> dst: [n] f32 (exact).
cudaError_t convert_bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream);
// src: [n] f32 -> dst: [n] f16 (subnormals kept).
cudaError_t convert_f32_to_f16(const float* src, __half* dst, int64_t n, cudaStream_t stream);
// src: [n] f16 -> dst: [n] f32 (exact).
cudaError_t convert_f16_to_f32(const __half* src, float* dst, int64_t n, cudaStream_t stream);

}  // namespace llmk::cuda
