// Test doubles for the scheduler: a paged KV allocator with copy-on-write
// forks and a prefix cache, and a fake model that emulates a KV cache of
// (token, position) pairs. The fake model's next token is a hash of the whole
// context it reads back through the block tables, so any addressing, copy,
// prefix-cache or offload mistake changes the output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <optional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/kv_allocator.hpp"
#include "core/kv_offloader.hpp"
#include "core/scheduler.hpp"

namespace llmk::sched_test {

class FakePagedAllocator final : public KvAllocator {
 public:
  FakePagedAllocator(uint32_t num_blocks, uint32_t block_size, bool prefix_caching = false)
      : block_size_(block_size), prefix_caching_(prefix_caching), ref_(num_blocks, 0), key_of_(num_blocks) {
    for (uint32_t b = 0; b < num_blocks; ++b) free_.push_back(static_cast<int32_t>(b));
  }

  bool reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) override {
    if (seqs_.count(args.seq_id)) throw Error(ErrorCode::invalid_argument, "reserve: live seq id");
    std::vector<int32_t> hits;
    if (prefix_caching_) {
      for (uint32_t end = block_size_; end + 1 <= args.num_tokens; end += block_size_) {
        auto it = index_.find(key(args.tokens, end));
        if (it == index_.end()) break;
        hits.push_back(it->second);
      }
    }
    const uint32_t num_new = blocks_for(args.num_tokens) - static_cast<uint32_t>(hits.size());
    size_t evictable_left = evictable_.size();
    for (int32_t b : hits)
      if (ref_[b] == 0) --evictable_left;  // a hit is not evictable for this reserve
    if (num_new > free_.size() + evictable_left) return false;
    Seq seq;
    for (int32_t b : hits) {
      if (ref_[b]++ == 0) evictable_.remove(b);
      seq.blocks.push_back(b);
    }
    for (uint32_t i = 0; i < num_new; ++i) seq.blocks.push_back(take_block());
    seq.len = args.num_tokens;
    seq.tokens.assign(args.tokens, args.tokens + args.num_tokens);
    *num_cached_tokens = static_cast<uint32_t>(hits.size()) * block_size_;
    prefix_query_tokens_ += args.num_tokens;
    prefix_hit_tokens_ += *num_cached_tokens;
    seqs_.emplace(args.seq_id, std::move(seq));
    return true;
  }

  bool extend(uint64_t seq_id, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies_out) override {
    Seq& seq = at(seq_id);
    if (num_tokens <= seq.len) return true;
    // The partial last block is written next: copy it first when shared.
    const bool cow = seq.len % block_size_ != 0 && ref_[seq.blocks.back()] > 1;
    const uint32_t num_new = blocks_for(num_tokens) - static_cast<uint32_t>(seq.blocks.size()) + (cow ? 1 : 0);
    if (num_new > free_.size() + evictable_.size()) return false;
    if (cow) {
      const int32_t old = seq.blocks.back();
      const int32_t fresh = take_block();
      copies_out.push_back({old * int32_t(block_size_), fresh * int32_t(block_size_),
                            int32_t(seq.len % block_size_)});
      release(old);
      seq.blocks.back() = fresh;
      num_cow_copies_ += 1;
    }
    while (seq.blocks.size() < blocks_for(num_tokens)) seq.blocks.push_back(take_block());
    seq.len = num_tokens;
    return true;
  }

  bool fork(uint64_t parent_id, uint64_t child_id) override {
    Seq child = at(parent_id);
    for (int32_t b : child.blocks) ref_[b] += 1;
    seqs_.emplace(child_id, std::move(child));
    num_forks += 1;
    return true;
  }

  void free_seq(uint64_t seq_id) override {
    for (int32_t b : at(seq_id).blocks) release(b);
    seqs_.erase(seq_id);
  }

  void commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n) override {
    Seq& seq = at(seq_id);
    if (first + n > seq.len) throw Error(ErrorCode::invalid_argument, "commit_tokens beyond the sequence");
    if (seq.tokens.size() < first + n) seq.tokens.resize(first + n);
    std::copy(tokens, tokens + n, seq.tokens.begin() + first);
    if (!prefix_caching_) return;
    for (uint32_t end = block_size_; end <= first + n; end += block_size_) {
      const int32_t b = seq.blocks[end / block_size_ - 1];
      if (!key_of_[b].empty()) continue;
      std::string k = key(seq.tokens.data(), end);
      if (index_.count(k)) continue;
      index_[k] = b;
      key_of_[b] = std::move(k);
    }
  }

  uint32_t block_table(uint64_t seq_id, std::vector<int32_t>& out) const override {
    const Seq& seq = seqs_.at(seq_id);
    for (int32_t b : seq.blocks) out.push_back(b * int32_t(block_size_));
    return static_cast<uint32_t>(seq.blocks.size());
  }
  uint32_t block_size() const override { return block_size_; }

  llmk_kv_usage usage() const override {
    llmk_kv_usage u{};
    u.total_slots = ref_.size() * block_size_;
    u.reserved_slots = (ref_.size() - free_.size()) * block_size_;
    for (const auto& [id, seq] : seqs_) u.used_slots += seq.len;
    u.cached_free_slots = evictable_.size() * block_size_;
    u.num_seqs = seqs_.size();
    u.prefix_query_tokens = prefix_query_tokens_;
    u.prefix_hit_tokens = prefix_hit_tokens_;
    u.num_cow_copies = num_cow_copies_;
    return u;
  }

  // Blocks referenced by live sequences.
  size_t num_live_blocks() const { return ref_.size() - free_.size() - evictable_.size(); }
  uint64_t num_forks = 0;

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    uint32_t len = 0;
    std::vector<int32_t> tokens;  // what commit_tokens said, for the prefix index
  };

  Seq& at(uint64_t id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) throw Error(ErrorCode::invalid_argument, "unknown seq id " + std::to_string(id));
    return it->second;
  }
  uint32_t blocks_for(uint32_t n) const { return (n + block_size_ - 1) / block_size_; }
  static std::string key(const int32_t* tokens, uint32_t n) {
    return std::string(reinterpret_cast<const char*>(tokens), n * sizeof(int32_t));
  }
  int32_t take_block() {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // evict the least recently freed cached block
      b = evictable_.front();
      evictable_.pop_front();
      index_.erase(key_of_[b]);
      key_of_[b].clear();
    }
    ref_[b] = 1;
    return b;
  }
  void release(int32_t b) {
    if (--ref_[b] > 0) return;
    if (!key_of_[b].empty()) evictable_.push_back(b);
    else free_.push_back(b);
  }

  uint32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;            // [num_blocks]
  std::vector<std::string> key_of_;     // [num_blocks] prefix-index key, "" when not indexed
  std::vector<int32_t> free_;
  std::list<int32_t> evictable_;        // cached, unreferenced; front = oldest
  std::map<std::string, int32_t> index_;
  std::unordered_map<uint64_t, Seq> seqs_;
  uint64_t prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0, num_cow_copies_ = 0;
};

// One contiguous range per sequence (block table of one entry, block size =
// max_seq_len), first fit, sized exactly: growing moves the range when the
// next slot is taken, returning a copy and freeing the old range at once. It
// refuses forks (it could not copy the data), which exercises the
// scheduler's fallback of prefilling such a sample on its own.
class FakeContiguousAllocator final : public KvAllocator {
 public:
  FakeContiguousAllocator(uint32_t num_slots, uint32_t max_seq_len) : owner_(num_slots, 0), max_seq_len_(max_seq_len) {}

  bool reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) override {
    const int32_t start = find_run(args.num_tokens);
    if (start < 0) return false;
    take(args.seq_id, start, args.num_tokens);
    ranges_[args.seq_id] = {start, args.num_tokens};
    *num_cached_tokens = 0;
    return true;
  }
  bool extend(uint64_t seq_id, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies_out) override {
    Range& r = ranges_.at(seq_id);
    if (num_tokens <= r.len) return true;
    bool in_place = r.start + num_tokens <= owner_.size();
    for (uint32_t i = r.len; in_place && i < num_tokens; ++i) in_place = owner_[r.start + i] == 0;
    if (in_place) {
      take(seq_id, r.start + int32_t(r.len), num_tokens - r.len);
      r.len = num_tokens;
      return true;
    }
    const int32_t start = find_run(num_tokens);  // while the old range is held: no overlap
    if (start < 0) return false;
    take(0, r.start, r.len);
    take(seq_id, start, num_tokens);
    copies_out.push_back({r.start, start, int32_t(r.len)});
    num_relocations += 1;
    r = {start, num_tokens};
    return true;
  }
  bool fork(uint64_t, uint64_t) override { return false; }
  void free_seq(uint64_t seq_id) override {
    const Range r = ranges_.at(seq_id);
    take(0, r.start, r.len);
    ranges_.erase(seq_id);
  }
  void commit_tokens(uint64_t, uint32_t, const int32_t*, uint32_t) override {}
  uint32_t block_table(uint64_t seq_id, std::vector<int32_t>& out) const override {
    out.push_back(ranges_.at(seq_id).start);
    return 1;
  }
  uint32_t block_size() const override { return max_seq_len_; }
  llmk_kv_usage usage() const override {
    llmk_kv_usage u{};
    u.total_slots = owner_.size();
    for (const auto& [id, r] : ranges_) u.used_slots += r.len;
    u.reserved_slots = u.used_slots;
    u.num_seqs = ranges_.size();
    u.num_relocations = num_relocations;
    return u;
  }
  uint64_t num_relocations = 0;

 private:
  struct Range {
    int32_t start = 0;
    uint32_t len = 0;
  };
  int32_t find_run(uint32_t n) const {
    uint32_t run = 0;
    for (size_t i = 0; i < owner_.size(); ++i) {
      run = owner_[i] == 0 ? run + 1 : 0;
      if (run == n) return int32_t(i + 1 - n);
    }
    return -1;
  }
  void take(uint64_t owner, int32_t start, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) owner_[size_t(start) + i] = owner;
  }
  std::vector<uint64_t> owner_;  // [num_slots] seq id, 0 = free
  uint32_t max_seq_len_;
  std::unordered_map<uint64_t, Range> ranges_;
};

// The next token of a context for a sample: what the fake model + sampler
// produce, and what tests use as the independent reference.
inline int32_t fake_next_token(const std::vector<int32_t>& context, int32_t sample_index) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(sample_index) * 0x9E3779B97F4A7C15ull) * 1099511628211ull;
  return 10 + static_cast<int32_t>((h >> 17) % 30000);
}

// Emulated KV cache: each slot holds the (token, position) written to it.
class FakeModel final : public KvOffloader {
 public:
  explicit FakeModel(size_t num_slots) : token_(num_slots, -1), position_(num_slots, -1) {}
  int64_t num_padding_rows = 0;  // rows of static padding seen
  // The model's next token after a context (sample index second); tests of
  // speculation swap in a rule whose output repeats.
  std::function<int32_t(const std::vector<int32_t>&, int32_t)> next_token = fake_next_token;

  // Checks the batch's shape, applies copies, writes the new K/V, then reads
  // each logits row's whole context back through its block table. A plan
  // made ahead takes its fed-back tokens from `previous`, the ids the step
  // before it sampled.
  std::vector<int32_t> forward(const StepPlan& plan, const std::vector<int32_t>* previous = nullptr) {
    StepBatch resolved;
    if (!plan.batch.fed_back.empty()) {
      require(previous != nullptr, "fed-back rows without the previous step's ids");
      resolved = plan.batch;
      for (const FedBackToken& f : plan.batch.fed_back) {
        require(plan.batch.token_ids.at(size_t(f.row)) == 0, "a fed-back row holds token 0 until resolved");
        resolved.token_ids.at(size_t(f.row)) = previous->at(size_t(f.previous_row));
      }
    }
    const StepBatch& b = plan.batch.fed_back.empty() ? plan.batch : resolved;
    require(b.query_start.size() == size_t(b.num_seqs()) + 1 && b.query_start[0] == 0, "query_start");
    require(b.query_start.back() == b.num_tokens(), "query_start end");
    require(b.positions.size() == b.token_ids.size() && b.slot_mapping.size() == b.token_ids.size(), "row arrays");
    require(b.block_tables.size() == size_t(b.num_seqs()) * size_t(b.max_blocks_per_seq), "block_tables shape");
    require(plan.logits.size() == b.logits_rows.size(), "logits targets");
    for (const llmk_kv_copy& c : b.kv_copies)
      for (int32_t i = 0; i < c.num_slots; ++i) {
        token_.at(c.dst_slot + i) = token_.at(c.src_slot + i);
        position_.at(c.dst_slot + i) = position_.at(c.src_slot + i);
      }
    // Token trees: a row's parent among its sequence's rows (-1: none); a
    // row sits at the next cache position, its position is the first new
    // one plus its depth, and it reads the cached tokens and its ancestors.
    require(b.tree_parents.empty() || b.tree_parents.size() == b.token_ids.size(), "tree_parents size");
    auto parent_of = [&](int32_t s, int32_t r) {
      return b.tree_parents.empty() ? r - b.query_start[s] - 1 : b.tree_parents[size_t(r)];
    };
    std::vector<int32_t> depth(b.token_ids.size(), 0);
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      for (int32_t r = b.query_start[s]; r < b.query_start[s + 1]; ++r) {
        const int32_t parent = parent_of(s, r);
        require(parent >= -1 && parent < r - b.query_start[s], "a tree parent is an earlier row of the sequence");
        depth[size_t(r)] = parent < 0 ? 0 : depth[size_t(b.query_start[s] + parent)] + 1;
        const int32_t first_new = b.context_lens[s] - (b.query_start[s + 1] - b.query_start[s]);
        const int32_t pos = first_new + depth[size_t(r)];
        const int32_t cache_pos = b.context_lens[s] - (b.query_start[s + 1] - r);
        require(b.positions[r] == pos, "positions are the context's last tokens (a tree's: by depth)");
        if (b.slot_mapping[r] < 0) {  // a static batch's padding row: reads its context, writes nothing
          require(plan.seqs[static_cast<size_t>(s)].is_padding, "only padding rows skip their KV write");
          for (int32_t p = 0; p <= pos; ++p)
            require(position_.at(slot(b, s, p)) == p, "a padding row's context is still held");
          ++num_padding_rows;
          continue;
        }
        require(b.slot_mapping[r] == slot(b, s, cache_pos), "slot_mapping follows the block table");
        token_.at(b.slot_mapping[r]) = b.token_ids[r];
        position_.at(b.slot_mapping[r]) = pos;
      }
    }
    std::vector<int32_t> out;
    for (size_t i = 0; i < b.logits_rows.size(); ++i) {
      const int32_t row = b.logits_rows[i];
      int32_t s = 0;
      while (b.query_start[s + 1] <= row) ++s;
      std::vector<int32_t> context, line;
      for (int32_t x = row - b.query_start[s]; x >= 0; x = parent_of(s, b.query_start[s] + x))
        line.insert(line.begin(), b.query_start[s] + x);
      const int32_t first_new = b.context_lens[s] - (b.query_start[s + 1] - b.query_start[s]);
      for (int32_t p = 0; p < first_new; ++p) {
        const int32_t sl = slot(b, s, p);
        require(position_.at(sl) == p, "KV slot holds the position it should (stale or lost KV)");
        context.push_back(token_.at(sl));
      }
      for (int32_t r : line) {
        require(position_.at(b.slot_mapping[r]) == b.positions[r], "a new row's KV slot holds its position");
        context.push_back(token_.at(b.slot_mapping[r]));
      }
      out.push_back(next_token(context, plan.logits[i].sample_index));
    }
    return out;
  }

  // Steps sent and not yet applied (overlapped stepping): KV may not be
  // saved or restored from the host meanwhile.
  size_t steps_in_flight = 0;

  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override {
    require(steps_in_flight == 0, "KV saved while a step is in flight");
    std::vector<uint8_t> data(slots.size() * 2 * sizeof(int32_t));
    for (size_t i = 0; i < slots.size(); ++i) {
      const int32_t pair[2] = {token_.at(slots[i]), position_.at(slots[i])};
      std::memcpy(data.data() + i * sizeof(pair), pair, sizeof(pair));
    }
    num_saved_slots += slots.size();
    return data;
  }
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override {
    require(steps_in_flight == 0, "KV restored while a step is in flight");
    require(data.size() == slots.size() * 2 * sizeof(int32_t), "restore size");
    for (size_t i = 0; i < slots.size(); ++i) {
      int32_t pair[2];
      std::memcpy(pair, data.data() + i * sizeof(pair), sizeof(pair));
      token_.at(slots[i]) = pair[0];
      position_.at(slots[i]) = pair[1];
    }
    num_restored_slots += slots.size();
  }

  size_t num_saved_slots = 0, num_restored_slots = 0;

 private:
  static void require(bool ok, const char* what) {
    if (!ok) throw Error(ErrorCode::internal, std::string("fake model: bad batch: ") + what);
  }
  static int32_t slot(const StepBatch& b, int32_t s, int32_t p) {
    return b.block_tables.at(size_t(s) * size_t(b.max_blocks_per_seq) + size_t(p / b.block_size)) + p % b.block_size;
  }
  std::vector<int32_t> token_;
  std::vector<int32_t> position_;
};


struct Expected {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::none;
};

// What a sample must produce, computed without the scheduler.
inline Expected reference_output(std::vector<int32_t> context, const SamplingParams& sp, int32_t index,
                                 const std::vector<int32_t>& eos, int32_t max_seq_len) {
  Expected e;
  auto in = [](const std::vector<int32_t>& ids, int32_t t) { return std::find(ids.begin(), ids.end(), t) != ids.end(); };
  for (;;) {
    const int32_t t = fake_next_token(context, index);
    context.push_back(t);
    e.tokens.push_back(t);
    if (in(sp.stop_token_ids, t) || (!sp.ignore_eos && in(eos, t))) { e.reason = FinishReason::stop; return e; }
    if (int32_t(e.tokens.size()) >= sp.max_tokens || int32_t(context.size()) >= max_seq_len) {
      e.reason = FinishReason::length;
      return e;
    }
  }
}

// What the detokenizer would see of one sample.
struct Outcome {
  std::vector<int32_t> tokens;
  int num_final_events = 0;
  int num_events_after_final = 0;
  FinishReason reason = FinishReason::none;
  std::string error;
  bool stop_token_flagged = false;
  Usage usage;
  Timings timings;
};

// A scheduler over a fake allocator and model, stepped like the actors would.
struct Harness {
  // max_steps_in_flight > 1: stepped as with a pipelined executor (pipelined_step).
  Harness(SchedulerSection cfg, uint32_t num_blocks, uint32_t block_size, int32_t max_seq_len = 4096,
          bool prefix_caching = false, std::vector<int32_t> eos = {}, int32_t max_steps_in_flight = 1)
      : kv(num_blocks, block_size, prefix_caching),
        model(size_t(num_blocks) * block_size),
        limits{max_seq_len, std::move(eos), 0},
        sched(cfg, limits, kv,
              SchedulerOptions{.clock = [this] { return clock_now; },
                               .offloader = &model,
                               .max_steps_in_flight = max_steps_in_flight}) {}

  void absorb(const std::vector<TokenEvent>& events) {
    for (const TokenEvent& e : events) {
      Outcome& o = out[{e.request_id, e.index}];
      if (o.num_final_events > 0) o.num_events_after_final += 1;
      if (e.token_id) o.tokens.push_back(*e.token_id);
      if (e.finished) {
        o.num_final_events += 1;
        o.reason = e.finish_reason;
        o.error = e.error;
        o.stop_token_flagged = e.is_stop_token;
        o.usage = e.usage;
        o.timings = e.timings;
      }
      if (e.request_done) num_done[e.request_id] += 1;
    }
  }

  // Steps the way the scheduler actor does with scheduler.overlap: a plan
  // is made ahead of the one in flight, the device computes both before the
  // host applies the first one's tokens (the most a plan can run ahead).
  bool overlap = false;
  struct Sent {
    StepPlan plan;
    std::optional<std::vector<int32_t>> sampled;
  };
  std::deque<Sent> in_flight;
  std::vector<int32_t> last_sampled;  // what the device sampled last
  int64_t num_fed_back_rows = 0;
  int64_t num_plans_ahead = 0;

  void send(StepPlan plan) {
    plans.push_back(summarize(plan));
    num_fed_back_rows += static_cast<int64_t>(plan.batch.fed_back.size());
    in_flight.push_back({std::move(plan), std::nullopt});
  }

  bool overlapped_step() {
    if (in_flight.empty()) {
      StepPlan plan = sched.schedule();
      absorb(plan.events);
      if (plan.empty()) return false;
      send(std::move(plan));
    }
    if (in_flight.size() == 1) {
      model.steps_in_flight = in_flight.size();
      StepPlan ahead = sched.schedule_ahead(in_flight.back().plan);
      model.steps_in_flight = 0;
      REQUIRE(ahead.events.empty());
      if (!ahead.empty()) {
        num_plans_ahead += 1;
        send(std::move(ahead));
      }
    }
    for (Sent& s : in_flight)
      if (!s.sampled) {
        s.sampled = model.forward(s.plan, &last_sampled);
        last_sampled = *s.sampled;
      }
    Sent done = std::move(in_flight.front());
    in_flight.pop_front();
    clock_now += std::chrono::milliseconds(10);
    const std::vector<TokenEvent> events = sched.update_from_output(done.plan, *done.sampled);
    check_rows(done.plan, *done.sampled, events);
    absorb(events);
    return true;
  }

  // Steps the way the scheduler actor does with a pipelined executor: plans
  // beside the steps in flight while fewer than max_steps_in_flight() are
  // and the Scheduler finds anything; the device computes each step as it
  // is sent (each stage takes the steps in order); then the host applies
  // the oldest. Every plan must be disjoint from the ones in flight.
  size_t peak_in_flight = 0;
  bool pipelined_step() {
    while (static_cast<int32_t>(in_flight.size()) < sched.max_steps_in_flight()) {
      model.steps_in_flight = in_flight.size();
      StepPlan plan = sched.schedule();
      model.steps_in_flight = 0;
      absorb(plan.events);
      if (plan.empty()) break;
      for (const Sent& other : in_flight)
        for (const ScheduledSeq& a : other.plan.seqs)
          for (const ScheduledSeq& b : plan.seqs)
            if (a.seq_id == b.seq_id) FAIL("sequence " << a.seq_id << " planned in two steps in flight");
      send(std::move(plan));
      model.steps_in_flight = in_flight.size() - 1;
      in_flight.back().sampled = model.forward(in_flight.back().plan);
      model.steps_in_flight = 0;
    }
    if (in_flight.empty()) return false;
    peak_in_flight = std::max(peak_in_flight, in_flight.size());
    Sent done = std::move(in_flight.front());
    in_flight.pop_front();
    clock_now += std::chrono::milliseconds(10);
    const std::vector<TokenEvent> events = sched.update_from_output(done.plan, *done.sampled);
    check_rows(done.plan, *done.sampled, events);
    absorb(events);
    return true;
  }

  // One step; false when nothing was planned.
  bool step() {
    if (sched.max_steps_in_flight() > 1) return pipelined_step();
    if (overlap) return overlapped_step();
    StepPlan plan = sched.schedule();
    absorb(plan.events);
    if (plan.empty()) return false;
    plans.push_back(summarize(plan));
    const std::vector<int32_t> sampled = model.forward(plan);
    clock_now += std::chrono::milliseconds(10);
    const std::vector<TokenEvent> events = sched.update_from_output(plan, sampled);
    check_rows(plan, sampled, events);
    absorb(events);
    return true;
  }

  // Every token event names the logits row it came from: that row was
  // planned for its request and sample, and sampled its token.
  static void check_rows(const StepPlan& plan, const std::vector<int32_t>& sampled,
                         const std::vector<TokenEvent>& events) {
    for (const TokenEvent& e : events) {
      if (!e.token_id) continue;
      REQUIRE(e.logits_row >= 0);
      REQUIRE(static_cast<size_t>(e.logits_row) < plan.logits.size());
      const LogitsTarget& target = plan.logits[static_cast<size_t>(e.logits_row)];
      if (target.request_id != e.request_id || target.sample_index != e.index ||
          sampled[static_cast<size_t>(e.logits_row)] != *e.token_id) {
        INFO("event " << e.request_id << "[" << e.index << "] names row " << e.logits_row << " of "
                      << target.request_id << "[" << target.sample_index << "]");
        FAIL("a token event names the wrong logits row");
      }
    }
  }

  // Steps until no work is left; throws if a step plans nothing while work remains.
  void run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && (sched.has_work() || !in_flight.empty()); ++i)
      if (!step() && sched.has_work()) throw Error(ErrorCode::internal, "scheduler stalled with work left");
    if (sched.has_work() || !in_flight.empty()) throw Error(ErrorCode::internal, "scheduler did not finish in time");
  }

  struct PlanSummary {
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_decodes = 0;
    int32_t num_prefill_chunks = 0;
    int32_t num_padding = 0;  // static batches: rows of members that already finished
    std::vector<std::string> request_ids;
  };
  PlanSummary summarize(const StepPlan& plan) const {
    PlanSummary p;
    p.num_tokens = plan.batch.num_tokens();
    p.num_seqs = plan.batch.num_seqs();
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.is_padding) {
        p.num_padding += 1;
        continue;
      }
      (s.is_prefill ? p.num_prefill_chunks : p.num_decodes) += 1;
      p.request_ids.push_back(sched.sequence(s.seq_id)->request_id);
    }
    return p;
  }

  FakePagedAllocator kv;
  FakeModel model;
  SchedulerLimits limits;
  TimePoint clock_now{std::chrono::seconds(1000)};
  Scheduler sched;
  std::map<std::pair<std::string, int32_t>, Outcome> out;
  std::map<std::string, int> num_done;
  std::vector<PlanSummary> plans;
};

inline SchedulerSection scheduler_section(uint32_t max_num_seqs, uint32_t max_num_batched_tokens,
                                          std::string policy = "continuous", std::string preemption = "recompute") {
  SchedulerSection s;
  s.max_num_seqs = max_num_seqs;
  s.max_num_batched_tokens = max_num_batched_tokens;
  s.policy = std::move(policy);
  s.preemption = std::move(preemption);
  return s;
}

}  // namespace llmk::sched_test
