#include "core/step.hpp"

#include <string>

#include "core/error.hpp"

namespace llmk {

void validate_step(const StepBatch& b, int32_t vocab_size, uint32_t max_seq_len, uint32_t max_step_tokens) {
  const int32_t n = b.num_tokens();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "step batch: " + what); };
  if (n > static_cast<int32_t>(max_step_tokens))
    bad(std::to_string(n) + " tokens exceed max_step_tokens " + std::to_string(max_step_tokens));
  if (b.positions.size() != static_cast<size_t>(n) || b.slot_mapping.size() != static_cast<size_t>(n))
    bad("positions and slot_mapping must have one entry per token");
  if (b.query_start.size() != static_cast<size_t>(b.num_seqs()) + 1 || b.query_start.front() != 0 ||
      b.query_start.back() != n)
    bad("query_start must have num_seqs + 1 entries from 0 to num_tokens");
  if (b.block_tables.size() != static_cast<size_t>(b.num_seqs()) * b.max_blocks_per_seq || b.block_size <= 0)
    bad("block_tables must be [num_seqs, max_blocks_per_seq] with a positive block_size");
  for (int32_t i = 0; i < n; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= vocab_size)
      bad("token id " + std::to_string(b.token_ids[i]) + " outside the vocabulary of " + std::to_string(vocab_size));
    if (b.positions[i] < 0 || b.positions[i] >= static_cast<int32_t>(max_seq_len))
      bad("position " + std::to_string(b.positions[i]) + " outside [0, " + std::to_string(max_seq_len) + ")");
  }
  // A row may appear more than once (n > 1 samples of one prompt share its
  // last row); the count is bounded by the scratch rows.
  if (b.num_logits() > static_cast<int32_t>(max_step_tokens))
    bad(std::to_string(b.num_logits()) + " logits rows exceed max_step_tokens " + std::to_string(max_step_tokens));
  for (int32_t r : b.logits_rows)
    if (r < 0 || r >= n) bad("logits row " + std::to_string(r) + " outside [0, " + std::to_string(n) + ")");
  if (b.tree_parents.empty()) return;
  if (b.tree_parents.size() != static_cast<size_t>(n)) bad("tree_parents must be empty or have one entry per token");
  for (int32_t s = 0; s < b.num_seqs(); ++s)
    for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t)
      if (b.tree_parents[t] < -1 || b.tree_parents[t] >= t - b.query_start[s])
        bad("tree parent " + std::to_string(b.tree_parents[t]) + " of row " + std::to_string(t) +
            " is not -1 or one of its sequence's rows before it");
}

}  // namespace llmk
