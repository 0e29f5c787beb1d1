// Reading and writing one layer's KV cache rows, per storage type. The
// attention math only ever sees float rows; everything that depends on how
// the cache stores them (F32 in place, F16 widened, I8 with per-group
// scales) lives here.
#pragma once

#include <cstdint>

#include "plugins/api/llmk_attention.h"

namespace llmk::attention_cpu {

struct KvShape {
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t group_size = 0;  // I8 only
  bool int8 = false;
  bool f16 = false;
  bool converted() const { return int8 || f16; }  // rows must be converted to be read as floats
};

// Physical slot of position p under the shared addressing rule.
// table: [max_blocks_per_seq] of one sequence.
inline int64_t slot_of(const int32_t* table, uint32_t block_size, int64_t p) {
  return static_cast<int64_t>(table[p / block_size]) + p % block_size;
}

// Stores the new tokens' K and V at their slots (negative slots are skipped).
// k, v: [num_tokens, num_kv_heads, head_dim]; slots: [num_tokens].
void write_kv(const llmk_kv_layer& kv, const KvShape& shape, const float* k, const float* v,
              const int32_t* slots, uint32_t num_tokens, int num_threads);

// Float rows for positions [first, first + count) of one sequence's kv_head.
// k_rows, v_rows: [count] pointers, valid until the next call with the same
// buffers. k_buf, v_buf: [count, head_dim] scratch, used only when the cache
// must be converted (I8, F16); F32 rows point into the cache itself.
void read_kv(const llmk_kv_layer& kv, const KvShape& shape, const int32_t* table, uint32_t block_size,
             uint32_t kv_head, int64_t first, int64_t count, const float** k_rows, const float** v_rows,
             float* k_buf, float* v_buf);

}  // namespace llmk::attention_cpu
