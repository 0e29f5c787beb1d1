#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// Rotary position embedding, Hugging Face "rotate half" layout: element i of
// the first half pairs with element i + head_dim/2, rotated by the angle
// position * theta^(-2i/head_dim).

// Fills the tables once (computed in double, stored as float).
// cos_table, sin_table: [max_positions, head_dim / 2].
void rope_tables(double theta, int64_t head_dim, int64_t max_positions, float* cos_table, float* sin_table);

// dst[t, h, :] = rotate(src[t, h, :], positions[t]). Rows are num_heads *
// head_dim wide in both; src_stride and dst_stride are the distances in floats
// between consecutive tokens (src may be a slice of a fused qkv row; src == dst is allowed).
// positions: [num_tokens], each in [0, max_positions) of the tables.
void rope(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t num_tokens,
          int64_t num_heads, int64_t head_dim, const int32_t* positions, const float* cos_table,
          const float* sin_table);

}  // namespace llmk::kernels::cpu
