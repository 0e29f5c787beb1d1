// The KV allocator as the scheduler sees it: an abstract C++ interface.
// KvAllocatorImpl (core/plugin_loader.hpp) adapts a loaded plugin to it;
// tests may drive the scheduler with their own implementation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "plugins/api/llmk_kv_allocator.h"

namespace llmk {

class KvAllocator {
 public:
  virtual ~KvAllocator() = default;
  // false when there is no space (nothing changed); throws llmk::Error on misuse.
  virtual bool reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) = 0;
  // Grow to num_tokens; appends any KV copies the host must perform first.
  virtual bool extend(uint64_t seq_id, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies_out) = 0;
  virtual bool fork(uint64_t parent_id, uint64_t child_id) = 0;
  virtual void free_seq(uint64_t seq_id) = 0;
  virtual void commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n) = 0;
  // Appends the sequence's block table entries to out; returns how many.
  virtual uint32_t block_table(uint64_t seq_id, std::vector<int32_t>& out) const = 0;
  virtual uint32_t block_size() const = 0;
  virtual llmk_kv_usage usage() const = 0;
  // Drops every prefix-cache block no live sequence references; returns how
  // many. An allocator without a prefix cache has nothing to drop.
  virtual uint32_t flush_cache() { return 0; }
  // Shrinks a sequence to its first num_tokens tokens (never below what was
  // committed), releasing what holds only later positions: the rollback of
  // speculated tokens the model rejected. Only where can_truncate().
  virtual bool can_truncate() const { return false; }
  virtual void truncate_seq(uint64_t /*seq_id*/, uint32_t /*num_tokens*/) {
    throw Error(ErrorCode::internal, "KV allocator: truncate_seq on an allocator that cannot roll back");
  }
  // StreamingLLM: drops positions [first, first + num_tokens) of a sequence
  // of `length` positions, the later ones moved down; appends the copies the
  // host must perform first. Only where can_evict().
  virtual bool can_evict() const { return false; }
  virtual void evict_tokens(uint64_t /*seq_id*/, uint32_t /*first*/, uint32_t /*num_tokens*/, uint32_t /*length*/,
                            std::vector<llmk_kv_copy>& /*copies_out*/) {
    throw Error(ErrorCode::internal, "KV allocator: evict_tokens on an allocator that cannot evict");
  }
};

}  // namespace llmk
