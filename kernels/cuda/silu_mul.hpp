// SwiGLU activation over a fused gate/up buffer, the CPU engine's
// kernels/cpu/silu_mul.hpp on the device:
//   out[r, i] = silu(gate_up[r, i]) * gate_up[r, dim + i],  silu(g) = g / (1 + exp(-g)).
// exp is the fast __expf (a few ulp on the GPU).
//
// Launch: a grid-stride loop over num_rows * dim outputs, kSiluMulThreads
// threads per block, at most kSiluMulMaxBlocks blocks. An empty input
// launches nothing.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int kSiluMulThreads = 256;
constexpr int64_t kSiluMulMaxBlocks = 4096;

// gate_up: [num_rows, 2 * dim] f32, device (gate half first, then up);
// out: [num_rows, dim] f32, device, not overlapping gate_up.
cudaError_t silu_mul(const float* gate_up, float* out, int64_t num_rows, int64_t dim, cudaStream_t stream);

}  // namespace llmk::cuda
