// The step plan: what the scheduler hands the executor once per iteration.
//
// One flattened batch with no padding. Sequence s owns token rows
// [query_start[s], query_start[s+1]); a decode has one row, a prefill chunk
// many. Its new tokens are the last (query_start[s+1] - query_start[s])
// positions of a context of context_lens[s] tokens. KV addressing follows
// plugins/api/llmk_attention.h.
//
// A step planned while the previous one still computes (scheduler.overlap)
// does not know the tokens that step samples. Its decode rows for them are
// listed in fed_back: token_ids[row] holds 0 there, and the executor puts in
// the id the previous step sampled for its logits row previous_row (on the
// device, where the sampler left it).
#pragma once

#include <cstdint>
#include <vector>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk {

// A token row whose id is the previous step's sampled id for one logits row.
struct FedBackToken {
  int32_t row = 0;           // in this step's token_ids
  int32_t previous_row = 0;  // in the previous step's logits rows
};

struct StepBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> context_lens;  // [num_seqs], after this step
  std::vector<int32_t> slot_mapping;  // [num_tokens], physical KV slot of each new token
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], first slot of each block
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
  // Rows whose hidden state becomes logits: usually the last row of each
  // sequence whose prefill is complete after this step. [num_logits]
  std::vector<int32_t> logits_rows;
  // KV moves the allocator asked for (copy-on-write, relocation); applied to
  // every layer before the forward.
  std::vector<llmk_kv_copy> kv_copies;
  // Rows whose token the previous step samples (see above); empty otherwise.
  std::vector<FedBackToken> fed_back;
  // Token trees (a speculating decode's drafts, core/speculation.hpp): empty
  // when every sequence's rows are causal; else [num_tokens], each row's
  // parent as an index among its sequence's rows (-1: the cached context),
  // as llmk_attention_step.tree_parents (attention API 3.3) reads it. A
  // tree row's position is the sequence's first new position plus its depth.
  std::vector<int32_t> tree_parents;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }
  int32_t num_logits() const { return static_cast<int32_t>(logits_rows.size()); }
};

// What every executor checks before a forward: array sizes agree, token ids
// lie in the vocabulary, positions in the context limit, at most
// max_step_tokens rows and logits rows, logits rows inside the batch.
// Throws Error(invalid_argument) naming the first problem ("step batch: ...").
void validate_step(const StepBatch& batch, int32_t vocab_size, uint32_t max_seq_len, uint32_t max_step_tokens);

}  // namespace llmk
