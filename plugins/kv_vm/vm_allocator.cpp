#include "plugins/kv_vm/vm_allocator.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_common/evict_moves.hpp"
#include "plugins/kv_common/range_desc.hpp"

namespace llmk::kv {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "kv.vm: " + message);
}

// Parses the options JSON; throws std::runtime_error naming the bad key.
OutputPredictor::Options parse_options(const char* options) {
  OutputPredictor::Options o;
  if (options == nullptr || options[0] == '\0') return o;
  const auto j = nlohmann::json::parse(options, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("kv.vm options are not a JSON object");
  auto number = [](const std::string& key, const nlohmann::json& v, double lo, double hi) {
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
      throw std::runtime_error("kv.vm: option '" + key + "' must be a number in " + std::to_string(lo) + ".." +
                               std::to_string(hi));
    }
    return v.get<double>();
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "default_output_ratio") {
      o.default_ratio = number(key, value, 0.0, 1.0);
    } else if (key == "quantile") {
      o.quantile = number(key, value, 0.0, 1.0);
    } else if (key == "window") {
      o.window = static_cast<uint32_t>(number(key, value, 1, 1 << 20));
    } else if (key == "min_samples") {
      o.min_samples = static_cast<uint32_t>(number(key, value, 0, 1 << 20));
    } else {
      throw std::runtime_error("kv.vm: unknown option '" + key +
                               "' (known: default_output_ratio, quantile, window, min_samples)");
    }
  }
  return o;
}

uint32_t effective_limit(uint32_t max_total_tokens, uint32_t max_seq_len, uint32_t num_tokens) {
  const uint32_t limit = max_total_tokens == 0 ? max_seq_len : std::min(max_total_tokens, max_seq_len);
  return std::max(limit, num_tokens);
}

}  // namespace

bool VmAllocator::supports(const llmk_kv_allocator_desc& desc, std::string& why) {
  if (!kv_common::supports_range_desc(desc, why)) return false;
  try {
    parse_options(desc.options);
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  return true;
}

VmAllocator::VmAllocator(const llmk_kv_allocator_desc& desc)
    : num_slots_(desc.num_slots), max_seq_len_(desc.max_seq_len), predictor_(OutputPredictor::Options{}) {
  std::string why;
  if (!supports(desc, why)) throw plugin::Error(LLMK_ERR_UNSUPPORTED, "kv.vm: " + why);
  predictor_ = OutputPredictor(parse_options(desc.options));
  give(0, num_slots_);
}

std::optional<VmAllocator::Fit> VmAllocator::best_fit(uint32_t want, uint32_t at_least) const {
  auto it = free_by_len_.lower_bound({want, 0});
  if (it != free_by_len_.end()) return Fit{it->second, want};  // smallest range that holds the prediction
  if (free_by_len_.empty() || free_by_len_.rbegin()->first < at_least) return std::nullopt;
  // Nothing holds the prediction: the largest range, which still holds what is needed now.
  return Fit{free_by_len_.rbegin()->second, free_by_len_.rbegin()->first};
}

void VmAllocator::take(uint32_t free_start, uint32_t length) {
  auto it = free_by_start_.find(free_start);
  const uint32_t free_len = it->second;
  free_by_len_.erase({free_len, free_start});
  free_by_start_.erase(it);
  if (free_len > length) {
    free_by_start_.emplace(free_start + length, free_len - length);
    free_by_len_.emplace(free_len - length, free_start + length);
  }
  free_slots_ -= length;
}

void VmAllocator::give(uint32_t start, uint32_t length) {
  free_slots_ += length;
  auto next = free_by_start_.lower_bound(start);
  if (next != free_by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {  // merge with the left neighbour
      start = prev->first;
      length += prev->second;
      free_by_len_.erase({prev->second, prev->first});
      free_by_start_.erase(prev);
    }
  }
  if (next != free_by_start_.end() && start + length == next->first) {  // and the right one
    length += next->second;
    free_by_len_.erase({next->second, next->first});
    free_by_start_.erase(next);
  }
  free_by_start_.emplace(start, length);
  free_by_len_.emplace(length, start);
}

void VmAllocator::release_range(uint32_t start, uint32_t length) {
  if (pins_.count(start)) {
    pinned_free_[start] = length;  // a pending fork copy still reads it
  } else {
    give(start, length);
  }
}

void VmAllocator::unpin(uint32_t start) {
  auto it = pins_.find(start);
  if (--it->second > 0) return;
  pins_.erase(it);
  auto z = pinned_free_.find(start);
  if (z != pinned_free_.end()) {
    give(z->first, z->second);
    pinned_free_.erase(z);
  }
}

llmk_status VmAllocator::reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) {
  const uint32_t n = args.num_tokens;
  if (seqs_.count(args.seq_id)) invalid("reserve: sequence " + std::to_string(args.seq_id) + " already exists");
  if (n == 0 || n > max_seq_len_) {
    invalid("reserve: num_tokens " + std::to_string(n) + " outside 1..max_seq_len " + std::to_string(max_seq_len_));
  }
  const uint32_t limit = effective_limit(args.max_total_tokens, max_seq_len_, n);
  const auto fit = best_fit(predictor_.predict_capacity(n, limit), n);
  if (!fit) return LLMK_ERR_NO_SPACE;
  take(fit->start, fit->length);
  Sequence seq;
  seq.start = fit->start;
  seq.capacity = fit->length;
  seq.num_tokens = n;
  seq.prompt_len = n;
  seq.limit = limit;
  seqs_.emplace(args.seq_id, seq);
  used_slots_ += n;
  predictor_.withdraw(args.seq_id);  // it was preempted, not finished
  if (num_cached_tokens) *num_cached_tokens = 0;
  return LLMK_OK;
}

llmk_status VmAllocator::extend(uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
                                uint32_t* num_copies) {
  if (num_copies) *num_copies = 0;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid("extend: unknown sequence " + std::to_string(seq_id));
  Sequence& seq = it->second;
  if (num_tokens < seq.num_tokens || num_tokens > max_seq_len_) {
    invalid("extend: sequence " + std::to_string(seq_id) + " has " + std::to_string(seq.num_tokens) +
            " tokens; cannot extend to " + std::to_string(num_tokens) + " (max_seq_len " +
            std::to_string(max_seq_len_) + ")");
  }
  // Plan first: all or nothing.
  const bool fits = num_tokens <= seq.capacity;
  auto right = free_by_start_.find(seq.start + seq.capacity);
  const bool in_place = !fits && right != free_by_start_.end() && seq.capacity + right->second >= num_tokens;
  const bool relocate = !fits && !in_place;
  if ((seq.pending_copy || relocate) && (copies == nullptr || max_copies < 1)) {
    invalid("extend: sequence " + std::to_string(seq_id) + " needs room for one copy");
  }
  uint32_t target = 0;
  std::optional<Fit> fit;
  if (!fits) {
    // Outgrew its prediction: ask for the prediction of what remains, and at
    // least double, so that a long sequence moves O(log length) times.
    const uint32_t limit = std::max(seq.limit, num_tokens);
    target = std::min(limit, std::max(predictor_.predict_capacity(num_tokens, limit), 2 * seq.capacity));
    if (relocate) {
      fit = best_fit(target, num_tokens);
      if (!fit) return LLMK_ERR_NO_SPACE;
    }
  }

  const uint32_t src = seq.pending_copy ? seq.pending_src : seq.start;
  const uint32_t live = seq.pending_copy ? seq.pending_len : seq.num_tokens;
  bool copied = false;
  if (in_place) {
    const uint32_t grow = std::min(seq.capacity + right->second, target) - seq.capacity;
    take(right->first, grow);
    seq.capacity += grow;
    ++num_extend_in_place_;
  } else if (relocate) {
    take(fit->start, fit->length);
    copies[0] = llmk_kv_copy{static_cast<int32_t>(src), static_cast<int32_t>(fit->start), static_cast<int32_t>(live)};
    copied = true;
    release_range(seq.start, seq.capacity);
    seq.start = fit->start;
    seq.capacity = fit->length;
    ++num_relocations_;
  }
  if (seq.pending_copy) {
    if (!copied) {
      copies[0] = llmk_kv_copy{static_cast<int32_t>(src), static_cast<int32_t>(seq.start), static_cast<int32_t>(live)};
      copied = true;
    }
    seq.pending_copy = false;
    unpin(src);
  }
  if (copied && num_copies) *num_copies = 1;
  seq.limit = std::max(seq.limit, num_tokens);
  used_slots_ += num_tokens - seq.num_tokens;
  seq.num_tokens = num_tokens;
  return LLMK_OK;
}

llmk_status VmAllocator::fork(uint64_t parent_id, uint64_t child_id) {
  if (seqs_.count(child_id)) invalid("fork: sequence " + std::to_string(child_id) + " already exists");
  auto it = seqs_.find(parent_id);
  if (it == seqs_.end()) invalid("fork: unknown sequence " + std::to_string(parent_id));
  const Sequence parent = it->second;
  const auto fit = best_fit(predictor_.predict_capacity(parent.num_tokens, parent.limit), parent.num_tokens);
  if (!fit) return LLMK_ERR_NO_SPACE;
  take(fit->start, fit->length);
  Sequence child = parent;
  child.start = fit->start;
  child.capacity = fit->length;
  child.pending_copy = true;
  // A parent whose own copy is still pending has not been written since.
  child.pending_src = parent.pending_copy ? parent.pending_src : parent.start;
  child.pending_len = parent.num_tokens;
  ++pins_[child.pending_src];
  used_slots_ += child.num_tokens;
  seqs_.emplace(child_id, child);
  return LLMK_OK;
}

void VmAllocator::free_seq(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;  // idempotent
  const Sequence seq = it->second;
  seqs_.erase(it);
  if (seq.limit > seq.prompt_len) {
    predictor_.add(seq_id, static_cast<double>(seq.num_tokens - seq.prompt_len) / (seq.limit - seq.prompt_len));
  }
  used_slots_ -= seq.num_tokens;
  release_range(seq.start, seq.capacity);
  if (seq.pending_copy) unpin(seq.pending_src);
}

void VmAllocator::truncate_seq(uint64_t seq_id, uint32_t num_tokens) {
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

void VmAllocator::evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies,
                                uint32_t max_copies, uint32_t* num_copies) {
  *num_copies = 0;
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) invalid("evict_tokens: unknown sequence " + std::to_string(seq_id));
  Sequence& seq = it->second;
  const std::string bad = kv_common::evict_range_error(first, num_tokens, seq.num_tokens);
  if (!bad.empty()) invalid("evict_tokens: sequence " + std::to_string(seq_id) + ": " + bad);
  if (seq.pending_copy) {  // a fork's K/V first lands in its own range, then moves
    if (max_copies < 1) invalid("evict_tokens: no room for the fork's copy");
    copies[(*num_copies)++] = llmk_kv_copy{static_cast<int32_t>(seq.pending_src),
                                           static_cast<int32_t>(seq.start), static_cast<int32_t>(seq.pending_len)};
    seq.pending_copy = false;
    unpin(seq.pending_src);
  }
  // Forks still waiting for their copy of this range's rows take it now,
  // before the rows move.
  for (auto& [other_id, other] : seqs_) {
    if (other_id == seq_id || !other.pending_copy || other.pending_src != seq.start) continue;
    if (*num_copies >= max_copies) invalid("evict_tokens: " + std::to_string(max_copies) + " copies are too few");
    copies[(*num_copies)++] = llmk_kv_copy{static_cast<int32_t>(seq.start),
                                           static_cast<int32_t>(other.start),
                                           static_cast<int32_t>(other.pending_len)};
    other.pending_copy = false;
      unpin(other.pending_src);
  }
  if (!kv_common::evict_moves(seq.start, first, num_tokens, seq.num_tokens, copies, max_copies, num_copies))
    invalid("evict_tokens: " + std::to_string(max_copies) + " copies are too few");
  used_slots_ -= num_tokens;
  seq.num_tokens -= num_tokens;
}

uint32_t VmAllocator::block_table(uint64_t seq_id, int32_t* entries, uint32_t max_entries) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  if (max_entries > 0) entries[0] = static_cast<int32_t>(it->second.start);
  return 1;
}

uint32_t VmAllocator::capacity(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second.capacity;
}

std::vector<std::pair<uint32_t, uint32_t>> VmAllocator::free_ranges() const {
  return {free_by_start_.begin(), free_by_start_.end()};
}

std::vector<std::pair<uint32_t, uint32_t>> VmAllocator::pinned_ranges() const {
  return {pinned_free_.begin(), pinned_free_.end()};
}

void VmAllocator::usage(llmk_kv_usage& out) const {
  out = llmk_kv_usage{};
  out.total_slots = num_slots_;
  out.reserved_slots = num_slots_ - free_slots_;
  out.used_slots = used_slots_;
  out.num_seqs = seqs_.size();
  out.num_relocations = num_relocations_;
  out.num_extend_in_place = num_extend_in_place_;
  out.largest_free_run = free_by_len_.empty() ? 0 : free_by_len_.rbegin()->first;
}

}  // namespace llmk::kv
