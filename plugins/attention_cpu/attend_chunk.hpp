// The online-softmax step of attention: a set of query rows meets one chunk
// of consecutive keys (flash-attention style, one pass, no score matrix
// beyond the chunk).
#pragma once

#include <cstdint>

namespace llmk::attention_cpu {

// Running state of num_rows query rows: m = max score seen, l = sum of
// exp(score - m), acc = sum of exp(score - m) * v. Start with m = -inf, l = 0, acc = 0.
struct RowsState {
  float* m;    // [num_rows]
  float* l;    // [num_rows]
  float* acc;  // [num_rows, head_dim]
};

// Folds keys [first_key, first_key + num_keys) into the state. Row r sees key
// j only when low_key[r] <= j <= last_key[r] (causality, and a sliding
// window when low_key[r] > 0); keys must be visited in order.
// q_rows: [num_rows] pointers to head_dim floats; low_key, last_key:
// [num_rows]; k_rows, v_rows: [num_keys] pointers; scores: [num_rows,
// num_keys] scratch.
void attend_chunk(const float* const* q_rows, const int64_t* low_key, const int64_t* last_key, int num_rows,
                  const float* const* k_rows, const float* const* v_rows, int64_t first_key, int num_keys,
                  int head_dim, float scale, float* scores, RowsState state);

// out_rows[r] = acc[r] / l[r].
void finish_rows(RowsState state, int num_rows, int head_dim, float* const* out_rows);

}  // namespace llmk::attention_cpu
