// kv.contiguous: the maximum-length baseline. The cache is cut into
// num_slots / max_seq_len regions of max_seq_len slots; every sequence owns one
// whole region whatever its length, so its block table is one entry (the
// region's first slot) and block_size() is max_seq_len.
//
// fork gives the child its own region; the parent's K/V is copied into it by
// the copy that the child's first extend returns. Until then the parent's
// slots are pinned: freeing the parent keeps its region reserved until the
// copy has been handed out (or the child is freed).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk::kv {

class ContiguousAllocator {
 public:
  static constexpr const char* kName = "kv.contiguous";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "contiguous KV cache: one max_seq_len region per sequence (the maximum-length baseline)";
  static constexpr const char* kCapabilities = R"json({"prefix_caching":false,"block_size":"max_seq_len"})json";

  static bool supports(const llmk_kv_allocator_desc& desc, std::string& why);
  explicit ContiguousAllocator(const llmk_kv_allocator_desc& desc);

  llmk_status reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens);
  llmk_status extend(uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
                     uint32_t* num_copies);
  llmk_status fork(uint64_t parent_id, uint64_t child_id);
  void free_seq(uint64_t seq_id);
  // API 2.3: rolls a sequence back to num_tokens; the range stays its own.
  void truncate_seq(uint64_t seq_id, uint32_t num_tokens);
  // API 2.4: drops positions [first, first + num_tokens); the later rows
  // move down within the range (copies). No prefix cache: nothing to stop.
  void evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
                    uint32_t* num_copies);
  void commit_tokens(uint64_t, uint32_t, const int32_t*, uint32_t) {}  // no prefix cache
  uint32_t block_table(uint64_t seq_id, int32_t* entries, uint32_t max_entries) const;
  uint32_t block_size() const { return region_len_; }
  void usage(llmk_kv_usage& out) const;

  // Introspection (tests): reserved regions no live sequence owns (pinned by a pending fork copy).
  std::vector<uint32_t> pinned_free_regions() const;

 private:
  struct Region {
    bool owned = false;   // by a live sequence
    uint32_t pins = 0;    // pending fork copies reading it
  };
  struct Sequence {
    uint32_t region = 0;
    uint32_t num_tokens = 0;
    bool pending_copy = false;  // K/V still to be copied from pending_src (fork)
    uint32_t pending_src = 0;   // region
    uint32_t pending_len = 0;
  };

  void release_region(uint32_t region);  // frees it once no one owns or pins it

  uint32_t region_len_;
  std::vector<Region> regions_;
  std::set<uint32_t> free_;  // lowest region first
  std::unordered_map<uint64_t, Sequence> seqs_;
  uint64_t used_slots_ = 0;
};

}  // namespace llmk::kv
