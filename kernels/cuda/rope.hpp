// Rotary position embedding in place on q and k, the CPU engine's pairing
// (kernels/cpu/rope.hpp, Hugging Face "rotate half"): within each head,
// element i of the first half pairs with element i + head_dim / 2:
//   y[i]        = x[i] * cos[p, i] - x[i + half] * sin[p, i]
//   y[i + half] = x[i + half] * cos[p, i] + x[i] * sin[p, i]
// with p = positions[t] and the tables core/rope_scaling.hpp's rope_tables
// (or kernels/cpu/rope_tables) fills, so any RoPE scaling is in the tables.
//
// Launch: one block per token (grid num_tokens), kRopeThreads threads over
// the (num_heads + num_kv_heads) * head_dim / 2 pairs of the token.
// num_tokens == 0 launches nothing.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int kRopeThreads = 128;

// q: [num_tokens, num_heads, head_dim] f32, device, consecutive tokens
//    q_stride floats apart (>= num_heads * head_dim; q may be a slice of a fused qkv row).
// k: [num_tokens, num_kv_heads, head_dim] f32, device, k_stride floats apart;
//    may be null when num_kv_heads == 0. q and k rows must not overlap.
// positions: [num_tokens] int32, device, each in [0, max_positions) of the
//    tables (the caller checks; the kernel does not).
// cos_table, sin_table: [max_positions, head_dim / 2] f32, device.
// head_dim even. Returns cudaErrorInvalidValue for an odd head_dim or a
// negative count.
cudaError_t rope(float* q, int64_t q_stride, int64_t num_heads, float* k, int64_t k_stride, int64_t num_kv_heads,
                 int64_t num_tokens, int64_t head_dim, const int32_t* positions, const float* cos_table,
                 const float* sin_table, cudaStream_t stream);

// The same where positions may pass the tables (a StreamingLLM stream's text
// positions): a row at max_positions or later takes cos and sin of
// position * inv_freq[i], in double, rounded to f32, as core/rope_scaling.hpp
// fills the tables (so a computed row equals the table's would-be row).
// inv_freq: [head_dim / 2] double, device.
cudaError_t rope(float* q, int64_t q_stride, int64_t num_heads, float* k, int64_t k_stride, int64_t num_kv_heads,
                 int64_t num_tokens, int64_t head_dim, const int32_t* positions, const float* cos_table,
                 const float* sin_table, int64_t max_positions, const double* inv_freq, cudaStream_t stream);

}  // namespace llmk::cuda
