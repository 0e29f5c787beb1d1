// The step most model tests run: one sequence's whole prompt prefilled into
// slots [0, n) of one contiguous block, logits for every row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/step.hpp"

namespace llmk::test {

inline StepBatch whole_prompt_step(const std::vector<int32_t>& ids, int32_t block_size) {
  StepBatch b;
  const auto n = static_cast<int32_t>(ids.size());
  b.token_ids = ids;
  for (int32_t i = 0; i < n; ++i) b.positions.push_back(i), b.slot_mapping.push_back(i), b.logits_rows.push_back(i);
  b.query_start = {0, n};
  b.context_lens = {n};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = block_size;
  return b;
}

}  // namespace llmk::test
