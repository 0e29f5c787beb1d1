// Step batches the benchmark programs build by hand, and what a decode step reads.
#pragma once

#include <cstdint>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/executor.hpp"
#include "core/step.hpp"

namespace llmk::bench {

// One sequence whose KV is one contiguous range from slot 0 (a single block
// of `capacity` slots): `ids` at positions [first, first + ids.size()),
// logits for the last of them.
inline StepBatch contiguous_step(const std::vector<int32_t>& ids, int32_t first, int32_t capacity) {
  StepBatch b;
  const int32_t n = static_cast<int32_t>(ids.size());
  b.token_ids = ids;
  for (int32_t i = 0; i < n; ++i) b.positions.push_back(first + i), b.slot_mapping.push_back(first + i);
  b.query_start = {0, n};
  b.context_lens = {first + n};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = capacity;
  b.logits_rows = {n - 1};
  return b;
}

// Weight bytes a batch-1 decode step streams: every weight once, except the
// embedding table, of which one row is gathered (a tied lm_head reads the
// table as the head, counted once among the executor's weights).
inline double decode_weight_bytes(const Checkpoint& checkpoint, const Executor& executor) {
  return static_cast<double>(executor.weight_bytes() - checkpoint.tensor("model.embed_tokens.weight").nbytes());
}

}  // namespace llmk::bench
