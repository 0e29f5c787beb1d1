// RMSNorm with an optional fused residual add, over rows of any length:
//   with x:    hidden[r, :] += x[r, :]                        (in place)
//   then:      out[r, :] = hidden[r, :] * rsqrt(mean(hidden[r, :]^2) + eps) * weight[:]
// the CPU engine's kernels/cpu/rmsnorm.hpp (add_rmsnorm / rmsnorm) on the device.
// Sums are f32 (per-thread partial sums, then a warp-shuffle block reduction).
//
// Launch: one block per row (grid num_rows), kRmsnormThreads threads across
// the row. num_rows == 0 launches nothing.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "dtype.hpp"

namespace llmk::cuda {

constexpr int kRmsnormThreads = 256;

// hidden: [num_rows, dim] f32, device; read, and updated in place when x is given.
// x: [num_rows, dim] f32, device, or null (no residual add).
// weight: [dim] of weight_dtype (f32, f16 or bf16), device.
// out: [num_rows, dim] f32, device; may alias hidden only when x is null (the
// residual stream would be overwritten otherwise); must not alias x.
// Any other weight dtype returns cudaErrorInvalidValue and launches nothing.
cudaError_t rmsnorm(float* hidden, const float* x, const void* weight, DType weight_dtype, float* out,
                    int64_t num_rows, int64_t dim, float eps, cudaStream_t stream);

}  // namespace llmk::cuda
