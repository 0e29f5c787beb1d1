// The checks every attention plugin's plan() makes on a step's host
// metadata before any kernel reads it: query_start runs from 0 to
// num_tokens, every slot and every block a sequence's context covers lies
// inside the cache, and no sequence has more new tokens than context.
// Throws plugin::Error(LLMK_ERR_INVALID_ARGUMENT) naming the sequence, the
// block or the slot.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "plugins/api/llmk_attention.h"
#include "plugins/api/plugin_helpers.hpp"

namespace llmk::attention_common {

inline void check_step(const llmk_attention_step& a) {
  using plugin::Error;
  if (a.num_seqs == 0) return;
  auto seq = [](uint32_t s) { return "sequence " + std::to_string(s); };
  if (a.query_start[0] != 0 || a.query_start[a.num_seqs] != static_cast<int32_t>(a.num_tokens))
    throw Error(LLMK_ERR_INVALID_ARGUMENT, "query_start must run from 0 to num_tokens");
  if (a.block_size == 0) throw Error(LLMK_ERR_INVALID_ARGUMENT, "block_size is 0");
  for (uint32_t t = 0; t < a.num_tokens; ++t)
    if (a.slot_mapping[t] >= static_cast<int32_t>(a.num_slots))
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "slot_mapping[" + std::to_string(t) + "] = " +
                                                 std::to_string(a.slot_mapping[t]) + " is past the cache's " +
                                                 std::to_string(a.num_slots) + " slots");
  for (uint32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t num_new = a.query_start[s + 1] - a.query_start[s];
    const int64_t ctx = a.context_lens[s];
    if (num_new < 0 || ctx < num_new)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, seq(s) + ": context_len " + std::to_string(ctx) +
                                                 " is shorter than its " + std::to_string(num_new) + " new tokens");
    const int64_t num_blocks = (ctx + a.block_size - 1) / a.block_size;
    if (num_blocks > a.max_blocks_per_seq)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, seq(s) + " needs " + std::to_string(num_blocks) + " blocks, table has " +
                                                 std::to_string(a.max_blocks_per_seq));
    const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t used = std::min<int64_t>(a.block_size, ctx - b * a.block_size);
      if (table[b] < 0 || table[b] + used > static_cast<int64_t>(a.num_slots))
        throw Error(LLMK_ERR_INVALID_ARGUMENT, seq(s) + ": block " + std::to_string(b) + " starts at slot " +
                                                   std::to_string(table[b]) + ", outside the cache's " +
                                                   std::to_string(a.num_slots) + " slots");
    }
  }
}

// The step's tree parents (API 3.3) when its struct has them and sets them;
// null: every sequence causal.
inline const int32_t* tree_parents(const llmk_attention_step& a) {
  return a.struct_size >= offsetof(llmk_attention_step, device_tree_parents) + sizeof(void*) ? a.tree_parents
                                                                                              : nullptr;
}

// Every new token's tree parent is -1 or one of its sequence's new tokens
// before it (so walks up a tree end); throws naming the first that is not.
inline void check_tree_parents(const llmk_attention_step& a) {
  using plugin::Error;
  const int32_t* parents = tree_parents(a);
  if (parents == nullptr) return;
  for (uint32_t s = 0; s < a.num_seqs; ++s)
    for (int32_t t = a.query_start[s]; t < a.query_start[s + 1]; ++t)
      if (parents[t] < -1 || parents[t] >= t - a.query_start[s])
        throw Error(LLMK_ERR_INVALID_ARGUMENT,
                    "tree_parents[" + std::to_string(t) + "] = " + std::to_string(parents[t]) + " of sequence " +
                        std::to_string(s) + " is not -1 or one of the sequence's " +
                        std::to_string(t - a.query_start[s]) + " new tokens before it");
}

}  // namespace llmk::attention_common
