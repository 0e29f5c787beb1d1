// Block Walsh-Hadamard rotation on the device, the CPU engine's
// kernels/cpu/hadamard.hpp: x[i*block .. (i+1)*block) <- H x[...] for every
// block, H the orthonormal Hadamard matrix of order `block` (a power of two).
// The executor rotates q and k with it before an int8 KV cache stores the
// keys: scores are unchanged, and one quantization scale covers a narrower
// range. The butterflies run in the CPU kernel's order with the same f32
// operations, so both give the same bits.
//
// Launch: one block of block / 2 threads (one butterfly each) per block of x,
// the block's values in shared memory. n == 0 or block == 1 launches nothing.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int64_t kHadamardMaxBlock = 1024;

// x: [n] f32, device, in place; n a multiple of block; block a power of two
// in 1 .. kHadamardMaxBlock. Returns cudaErrorInvalidValue otherwise.
cudaError_t hadamard_blocks(float* x, int64_t n, int64_t block, cudaStream_t stream);

}  // namespace llmk::cuda
