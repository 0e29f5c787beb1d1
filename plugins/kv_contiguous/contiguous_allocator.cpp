#include "plugins/kv_contiguous/contiguous_allocator.hpp"

#include <algorithm>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_common/evict_moves.hpp"
#include "plugins/kv_common/range_desc.hpp"

namespace llmk::kv {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "kv.contiguous: " + message);
}

}  // namespace

bool ContiguousAllocator::supports(const llmk_kv_allocator_desc& desc, std::string& why) {
  return kv_common::supports_range_desc(desc, why);
}

ContiguousAllocator::ContiguousAllocator(const llmk_kv_allocator_desc& desc) : region_len_(desc.max_seq_len) {
  std::string why;
  if (!supports(desc, why)) throw plugin::Error(LLMK_ERR_UNSUPPORTED, "kv.contiguous: " + why);
  regions_.resize(desc.num_slots / region_len_);
  for (uint32_t r = 0; r < regions_.size(); ++r) free_.insert(free_.end(), r);
}

llmk_status ContiguousAllocator::reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) {
  if (seqs_.count(args.seq_id)) invalid("reserve: sequence " + std::to_string(args.seq_id) + " already exists");
  if (args.num_tokens == 0 || args.num_tokens > region_len_) {
    invalid("reserve: num_tokens " + std::to_string(args.num_tokens) + " outside 1..max_seq_len " +
            std::to_string(region_len_));
  }
  if (free_.empty()) return LLMK_ERR_NO_SPACE;
  Sequence seq;
  seq.region = *free_.begin();
  free_.erase(free_.begin());
  regions_[seq.region].owned = true;
  seq.num_tokens = args.num_tokens;
  used_slots_ += seq.num_tokens;
  seqs_.emplace(args.seq_id, seq);
  if (num_cached_tokens) *num_cached_tokens = 0;
  return LLMK_OK;
}

llmk_status ContiguousAllocator::extend(uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies,
                                        uint32_t max_copies, uint32_t* num_copies) {
  if (num_copies) *num_copies = 0;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid("extend: unknown sequence " + std::to_string(seq_id));
  Sequence& seq = it->second;
  if (num_tokens < seq.num_tokens || num_tokens > region_len_) {
    invalid("extend: sequence " + std::to_string(seq_id) + " has " + std::to_string(seq.num_tokens) +
            " tokens; cannot extend to " + std::to_string(num_tokens) + " (max_seq_len " +
            std::to_string(region_len_) + ")");
  }
  if (seq.pending_copy) {
    if (copies == nullptr || max_copies < 1) invalid("extend: a forked sequence needs room for one copy");
    copies[0] = llmk_kv_copy{static_cast<int32_t>(seq.pending_src * region_len_),
                             static_cast<int32_t>(seq.region * region_len_), static_cast<int32_t>(seq.pending_len)};
    if (num_copies) *num_copies = 1;
    seq.pending_copy = false;
    --regions_[seq.pending_src].pins;
    release_region(seq.pending_src);
  }
  used_slots_ += num_tokens - seq.num_tokens;
  seq.num_tokens = num_tokens;
  return LLMK_OK;
}

llmk_status ContiguousAllocator::fork(uint64_t parent_id, uint64_t child_id) {
  if (seqs_.count(child_id)) invalid("fork: sequence " + std::to_string(child_id) + " already exists");
  auto it = seqs_.find(parent_id);
  if (it == seqs_.end()) invalid("fork: unknown sequence " + std::to_string(parent_id));
  if (free_.empty()) return LLMK_ERR_NO_SPACE;
  const Sequence& parent = it->second;
  Sequence child;
  child.region = *free_.begin();
  free_.erase(free_.begin());
  regions_[child.region].owned = true;
  child.num_tokens = parent.num_tokens;
  child.pending_copy = true;
  // A parent whose own copy is still pending has not been written since its
  // fork: its content lives in the same source.
  child.pending_src = parent.pending_copy ? parent.pending_src : parent.region;
  child.pending_len = parent.num_tokens;
  ++regions_[child.pending_src].pins;
  used_slots_ += child.num_tokens;
  seqs_.emplace(child_id, child);
  return LLMK_OK;
}

void ContiguousAllocator::release_region(uint32_t r) {
  if (!regions_[r].owned && regions_[r].pins == 0) free_.insert(r);
}

void ContiguousAllocator::free_seq(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;  // idempotent
  const Sequence seq = it->second;
  seqs_.erase(it);
  used_slots_ -= seq.num_tokens;
  regions_[seq.region].owned = false;
  release_region(seq.region);
  if (seq.pending_copy) {
    --regions_[seq.pending_src].pins;
    release_region(seq.pending_src);
  }
}

void ContiguousAllocator::truncate_seq(uint64_t seq_id, uint32_t num_tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid("truncate_seq: unknown sequence " + std::to_string(seq_id));
  Sequence& seq = it->second;
  if (num_tokens == 0 || num_tokens > seq.num_tokens) {
    invalid("truncate_seq: sequence " + std::to_string(seq_id) + " has " + std::to_string(seq.num_tokens) +
            " tokens; cannot truncate to " + std::to_string(num_tokens));
  }
  used_slots_ -= seq.num_tokens - num_tokens;
  seq.num_tokens = num_tokens;
  // A fork's pending copy brings only the positions it still has.
  if (seq.pending_copy) seq.pending_len = std::min(seq.pending_len, num_tokens);
}

void ContiguousAllocator::evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies,
                                uint32_t max_copies, uint32_t* num_copies) {
  *num_copies = 0;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid("evict_tokens: unknown sequence " + std::to_string(seq_id));
  Sequence& seq = it->second;
  const std::string bad = kv_common::evict_range_error(first, num_tokens, seq.num_tokens);
  if (!bad.empty()) invalid("evict_tokens: sequence " + std::to_string(seq_id) + ": " + bad);
  if (seq.pending_copy) {  // a fork's K/V first lands in its own range, then moves
    if (max_copies < 1) invalid("evict_tokens: no room for the fork's copy");
    copies[(*num_copies)++] = llmk_kv_copy{static_cast<int32_t>(seq.pending_src * region_len_),
                                           static_cast<int32_t>(seq.region * region_len_), static_cast<int32_t>(seq.pending_len)};
    seq.pending_copy = false;
    --regions_[seq.pending_src].pins;
    release_region(seq.pending_src);
  }
  // Forks still waiting for their copy of this range's rows take it now,
  // before the rows move.
  for (auto& [other_id, other] : seqs_) {
    if (other_id == seq_id || !other.pending_copy || other.pending_src != seq.region) continue;
    if (*num_copies >= max_copies) invalid("evict_tokens: " + std::to_string(max_copies) + " copies are too few");
    copies[(*num_copies)++] = llmk_kv_copy{static_cast<int32_t>(seq.region * region_len_),
                                           static_cast<int32_t>(other.region * region_len_),
                                           static_cast<int32_t>(other.pending_len)};
    other.pending_copy = false;
      --regions_[other.pending_src].pins;
      release_region(other.pending_src);
  }
  if (!kv_common::evict_moves(seq.region * region_len_, first, num_tokens, seq.num_tokens, copies, max_copies, num_copies))
    invalid("evict_tokens: " + std::to_string(max_copies) + " copies are too few");
  used_slots_ -= num_tokens;
  seq.num_tokens -= num_tokens;
}

uint32_t ContiguousAllocator::block_table(uint64_t seq_id, int32_t* entries, uint32_t max_entries) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  if (max_entries > 0) entries[0] = static_cast<int32_t>(it->second.region * region_len_);
  return 1;
}

std::vector<uint32_t> ContiguousAllocator::pinned_free_regions() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < regions_.size(); ++r) {
    if (!regions_[r].owned && regions_[r].pins > 0) out.push_back(r);
  }
  return out;
}

void ContiguousAllocator::usage(llmk_kv_usage& out) const {
  out = llmk_kv_usage{};
  const uint64_t len = region_len_;
  out.total_slots = regions_.size() * len;
  out.reserved_slots = (regions_.size() - free_.size()) * len;
  out.used_slots = used_slots_;
  out.num_seqs = seqs_.size();
  uint64_t run = 0;
  uint32_t prev = UINT32_MAX - 1;
  for (uint32_t r : free_) {  // ascending
    run = (r == prev + 1) ? run + 1 : 1;
    prev = r;
    out.largest_free_run = std::max(out.largest_free_run, run * len);
  }
}

}  // namespace llmk::kv
