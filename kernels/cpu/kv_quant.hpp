// Int8 KV cache: symmetric group quantization along head_dim.
//
// A token's K (or V) row of num_kv_heads * head_dim floats is split into
// groups of group_size consecutive elements (group_size divides head_dim, so
// no group straddles two heads); each group stores int8 values and one f32
// scale = max |v| / 127, with v ~= q * scale and |v - deq(v)| <= scale / 2.
// Layout as in plugins/api/llmk_attention.h: int8[slot][dim],
// float[slot][dim / group_size].
#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// src: [num_rows, dim] -> dst: [num_rows, dim], scales: [num_rows, dim / group_size].
void kv_quantize(const float* src, int8_t* dst, float* scales, int64_t num_rows, int64_t dim, int64_t group_size);

// Writes each row r of src: [num_rows, dim] to slot slots[r] of an int8 cache
// (cache: [num_slots, dim], cache_scales: [num_slots, dim / group_size]).
// Negative slots are skipped (padding tokens).
void kv_quantize_to_slots(const float* src, const int32_t* slots, int64_t num_rows, int64_t dim, int64_t group_size,
                          int8_t* cache, float* cache_scales);

// src: [dim] int8 with scales: [dim / group_size] -> dst: [dim] f32.
void kv_dequantize_row(const int8_t* src, const float* scales, float* dst, int64_t dim, int64_t group_size);

// Many rows: src: [num_rows, dim], scales: [num_rows, dim / group_size] -> dst: [num_rows, dim].
void kv_dequantize(const int8_t* src, const float* scales, float* dst, int64_t num_rows, int64_t dim,
                   int64_t group_size);

}  // namespace llmk::kernels::cpu
