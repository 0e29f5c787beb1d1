// kv.vm: the "VM allocator" (after PPL.LLM's). Every sequence owns one
// contiguous range of slots sized prompt + predicted output, so its block
// table is one entry (the range's first slot) and block_size() is
// max_seq_len. Ranges come best-fit from a free list whose ranges merge with
// their neighbours when freed.
//
// The prediction is OutputPredictor's: a quantile of how much of their
// max_tokens budget recent requests used. A sequence that outgrows its range
// grows in place when the free range to its right is large enough
// (num_extend_in_place), else moves to a larger range (extend returns one copy
// of its live slots; num_relocations), else extend answers LLMK_ERR_NO_SPACE
// and the scheduler preempts. fork gives the child its own range; the
// parent's K/V is copied by the copy the child's first extend returns, and the
// source slots stay reserved until then. See docs/kv_allocators.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plugins/api/llmk_kv_allocator.h"
#include "plugins/kv_vm/output_predictor.hpp"

namespace llmk::kv {

class VmAllocator {
 public:
  static constexpr const char* kName = "kv.vm";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "VM KV cache: one contiguous range per sequence sized prompt + predicted output, best-fit, grows or relocates";
  static constexpr const char* kCapabilities =
      R"json({"prefix_caching":false,"block_size":"max_seq_len","relocation":true,)json"
      R"json("options":{"default_output_ratio":"0..1, default 0.5","quantile":"0..1, default 0.9",)json"
      R"json("window":"finished requests remembered, default 256","min_samples":"default 4"}})json";

  static bool supports(const llmk_kv_allocator_desc& desc, std::string& why);
  explicit VmAllocator(const llmk_kv_allocator_desc& desc);

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
  uint32_t block_size() const { return max_seq_len_; }
  void usage(llmk_kv_usage& out) const;

  // Introspection (tests, diagnostics).
  uint32_t capacity(uint64_t seq_id) const;  // slots of its range (0: unknown sequence)
  std::vector<std::pair<uint32_t, uint32_t>> free_ranges() const;    // (start, length), ascending
  std::vector<std::pair<uint32_t, uint32_t>> pinned_ranges() const;  // reserved for pending fork copies only
  double predicted_ratio() const { return predictor_.ratio(); }

 private:
  struct Sequence {
    uint32_t start = 0;
    uint32_t capacity = 0;
    uint32_t num_tokens = 0;
    uint32_t prompt_len = 0;  // tokens at reserve
    uint32_t limit = 0;       // max_total_tokens, capped by max_seq_len
    bool pending_copy = false;
    uint32_t pending_src = 0;  // first slot of the parent's K/V
    uint32_t pending_len = 0;
  };
  struct Fit {
    uint32_t start;
    uint32_t length;
  };

  std::optional<Fit> best_fit(uint32_t want, uint32_t at_least) const;
  void take(uint32_t free_start, uint32_t length);  // from the front of a free range
  void give(uint32_t start, uint32_t length);       // merges with free neighbours
  void release_range(uint32_t start, uint32_t length);
  void unpin(uint32_t start);

  uint32_t num_slots_;
  uint32_t max_seq_len_;
  OutputPredictor predictor_;
  std::map<uint32_t, uint32_t> free_by_start_;       // start -> length
  std::set<std::pair<uint32_t, uint32_t>> free_by_len_;  // (length, start)
  uint64_t free_slots_ = 0;
  std::unordered_map<uint32_t, uint32_t> pins_;  // range start -> pending copies reading it
  std::map<uint32_t, uint32_t> pinned_free_;     // released ranges kept for pins: start -> length
  std::unordered_map<uint64_t, Sequence> seqs_;
  uint64_t used_slots_ = 0;
  uint64_t num_relocations_ = 0;
  uint64_t num_extend_in_place_ = 0;
};

}  // namespace llmk::kv
