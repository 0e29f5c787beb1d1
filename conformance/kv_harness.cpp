#include "conformance/kv_harness.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>

namespace kvtest {

KvTraits KvTraits::from_capabilities(std::string_view capabilities_json) {
  const auto caps = nlohmann::json::parse(capabilities_json, nullptr, false);
  if (!caps.is_object()) throw std::invalid_argument("capabilities are not a JSON object: " + std::string(capabilities_json));
  const auto flag = [&](const char* key) {
    const auto it = caps.find(key);
    if (it == caps.end()) return false;
    if (!it->is_boolean()) throw std::invalid_argument(std::string("capability '") + key + "' is not a boolean");
    return it->get<bool>();
  };
  KvTraits t;
  const auto block = caps.find("block_size");
  if (block == caps.end()) throw std::invalid_argument("capabilities lack 'block_size'");
  if (block->is_object()) {
    t.paged = true;
  } else if (!(block->is_string() && block->get<std::string>() == "max_seq_len")) {
    throw std::invalid_argument("capability 'block_size' is neither {\"min\",\"max\"} nor \"max_seq_len\"");
  }
  t.prefix_caching = flag("prefix_caching");
  t.copy_on_write = flag("copy_on_write");
  t.relocation = flag("relocation");
  return t;
}

void Harness::write(uint64_t id, uint32_t from, uint32_t num_commit) {
  const ShadowSeq& seq = live_.at(id);
  const auto t = table(id);
  for (uint32_t p = from; p < seq.tokens.size(); ++p) {
    const uint32_t s = slot(t, p);
    KV_REQUIRE(s < kv_.size());
    kv_[s] = SlotValue{seq.prefix[p], seq.tokens[p]};
  }
  const uint32_t n = std::min(static_cast<uint32_t>(seq.tokens.size()) - from, num_commit);
  if (n > 0) alloc_.commit_tokens(id, from, seq.tokens.data() + from, n);
}

void Harness::apply(const std::vector<llmk_kv_copy>& copies) {
  for (const auto& c : copies) {
    KV_REQUIRE(c.num_slots > 0);
    KV_REQUIRE(c.src_slot >= 0);
    KV_REQUIRE(c.dst_slot >= 0);
    KV_REQUIRE(static_cast<size_t>(c.src_slot + c.num_slots) <= kv_.size());
    KV_REQUIRE(static_cast<size_t>(c.dst_slot + c.num_slots) <= kv_.size());
    // Hosts may copy with memcpy: source and destination never overlap.
    KV_REQUIRE((c.src_slot + c.num_slots <= c.dst_slot || c.dst_slot + c.num_slots <= c.src_slot));
    std::copy(kv_.begin() + c.src_slot, kv_.begin() + c.src_slot + c.num_slots, kv_.begin() + c.dst_slot);
  }
}

bool Harness::reserve(uint64_t id, const std::vector<int32_t>& tokens, uint32_t max_total, uint32_t* cached_out) {
  const auto before = alloc_.usage();
  llmk_kv_reserve_args args{id, tokens.data(), static_cast<uint32_t>(tokens.size()), max_total};
  uint32_t cached = 12345;
  if (!alloc_.reserve(args, &cached)) {
    KV_REQUIRE(same_usage(before, alloc_.usage()));  // all or nothing
    KV_REQUIRE(table(id).empty());
    return false;
  }
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  KV_REQUIRE(cached < n);  // at least one token is computed
  if (prefix_caching_) {
    KV_REQUIRE(cached % alloc_.block_size() == 0);
  } else {
    KV_REQUIRE(cached == 0);
  }
  ShadowSeq seq;
  seq.tokens = tokens;
  seq.max_total = max_total;
  uint64_t h = 0;
  for (int32_t t : tokens) seq.prefix.push_back(h = next_prefix(h, t));
  live_[id] = seq;
  // A hit must already hold exactly this prefix's K/V.
  const auto t = table(id);
  for (uint32_t p = 0; p < cached; ++p) {
    const SlotValue& v = kv_[slot(t, p)];
    KV_REQUIRE(v.prefix == seq.prefix[p]);
    KV_REQUIRE(v.token == seq.tokens[p]);
  }
  write(id, cached);
  if (prefix_caching_) {
    expected_.prefix_query_tokens += n;
    expected_.prefix_hit_tokens += cached;
  }
  if (cached_out) *cached_out = cached;
  return true;
}

bool Harness::extend(uint64_t id, const std::vector<int32_t>& new_tokens) {
  return grow(id, new_tokens, UINT32_MAX);
}

bool Harness::speculate(uint64_t id, const std::vector<int32_t>& drafts, uint32_t num_accepted) {
  KV_REQUIRE(num_accepted <= drafts.size());
  const uint32_t old_len = static_cast<uint32_t>(live_.at(id).tokens.size());
  if (!grow(id, drafts, num_accepted)) return false;
  const uint32_t new_len = old_len + num_accepted;
  const auto before = alloc_.usage();
  const auto old_table = table(id);
  alloc_.truncate_seq(id, new_len);
  ShadowSeq& seq = live_.at(id);
  seq.tokens.resize(new_len);
  seq.prefix.resize(new_len);
  const auto after = alloc_.usage();
  const auto new_table = table(id);
  // Nothing moves: the kept positions keep their slots.
  KV_REQUIRE(new_table.size() <= old_table.size());
  KV_REQUIRE(std::equal(new_table.begin(), new_table.end(), old_table.begin()));
  KV_REQUIRE(after.used_slots <= before.used_slots);
  KV_REQUIRE(after.num_seqs == before.num_seqs);
  if (!traits_.paged) KV_REQUIRE(after.reserved_slots == before.reserved_slots);  // a range stays whole
  // A rollback below what was committed (everything kept here) is refused
  // by an allocator that indexes commits for its prefix cache.
  if (prefix_caching_ && new_len > 1) {
    bool refused = false;
    try {
      alloc_.truncate_seq(id, new_len - 1);
    } catch (const std::exception&) {
      refused = true;
    }
    KV_REQUIRE(refused);
    KV_REQUIRE(same_usage(after, alloc_.usage()));
  }
  return true;
}

bool Harness::grow(uint64_t id, const std::vector<int32_t>& new_tokens, uint32_t num_commit) {
  ShadowSeq& seq = live_.at(id);
  const uint32_t old_len = static_cast<uint32_t>(seq.tokens.size());
  const uint32_t new_len = old_len + static_cast<uint32_t>(new_tokens.size());
  const uint32_t bs = alloc_.block_size();
  const auto before = alloc_.usage();
  const auto old_table = table(id);
  // Copy-on-write: writing into a partial last block that another sequence
  // shares must copy it first.
  bool shared_partial = false;
  if (traits_.copy_on_write && old_len % bs != 0 && new_len > old_len) {
    for (const auto& [other, s] : live_) {
      if (other == id) continue;
      const auto ot = table(other);
      if (std::find(ot.begin(), ot.end(), old_table.back()) != ot.end()) shared_partial = true;
    }
  }
  std::vector<llmk_kv_copy> copies;
  if (!alloc_.extend(id, new_len, copies)) {
    KV_REQUIRE(copies.empty());
    KV_REQUIRE(same_usage(before, alloc_.usage()));
    KV_REQUIRE(table(id) == old_table);
    return false;
  }
  const auto new_table = table(id);
  if (traits_.copy_on_write) {
    KV_REQUIRE(copies.size() == (shared_partial ? 1u : 0u));
    if (shared_partial) {
      KV_REQUIRE(copies[0].src_slot == old_table.back());
      KV_REQUIRE(copies[0].dst_slot == new_table[old_len / bs]);
      KV_REQUIRE(copies[0].num_slots == static_cast<int32_t>(old_len % bs));
      ++expected_.cow_copies;
    }
    // Full blocks never move.
    for (uint32_t i = 0; i < old_len / bs; ++i) KV_REQUIRE(new_table[i] == old_table[i]);
  } else {
    // One range per sequence: it moves only where relocation is declared,
    // and one copy brings its K/V along (or, after a fork, the parent's).
    const bool relocated = new_table[0] != old_table[0];
    if (!traits_.relocation) KV_REQUIRE_FALSE(relocated);
    KV_REQUIRE(copies.size() == ((relocated || !seq.readable) ? 1u : 0u));
    if (relocated) ++expected_.relocations;
    if (!copies.empty()) {
      KV_REQUIRE(copies[0].dst_slot == new_table[0]);
      KV_REQUIRE(copies[0].num_slots == static_cast<int32_t>(old_len));
    }
  }
  apply(copies);
  seq.readable = true;
  uint64_t h = seq.prefix.empty() ? 0 : seq.prefix.back();
  for (int32_t t : new_tokens) {
    seq.tokens.push_back(t);
    seq.prefix.push_back(h = next_prefix(h, t));
  }
  write(id, old_len, num_commit);
  return true;
}

void Harness::evict(uint64_t id, uint32_t first, uint32_t n) {
  ShadowSeq& seq = live_.at(id);
  const uint32_t len = static_cast<uint32_t>(seq.tokens.size()), bs = alloc_.block_size();
  KV_REQUIRE(n > 0 && first + n <= len);
  const auto before = alloc_.usage();
  const auto old_table = table(id);
  std::vector<llmk_kv_copy> copies;
  alloc_.evict_tokens(id, first, n, len, copies);
  const auto after = alloc_.usage();
  const auto new_table = table(id);
  if (traits_.paged) {
    KV_REQUIRE(copies.empty());
    std::vector<int32_t> expected(old_table);
    expected.erase(expected.begin() + first / bs, expected.begin() + (first + n) / bs);
    KV_REQUIRE(new_table == expected);
  } else {
    KV_REQUIRE(new_table == old_table);  // the range stays
    // Less only where a delivered fork copy unpinned a freed parent's range.
    KV_REQUIRE(after.reserved_slots <= before.reserved_slots);
    KV_REQUIRE(after.used_slots + n == before.used_slots);
    KV_REQUIRE(copies.size() <= len / n + 2 + before.num_seqs);
  }
  KV_REQUIRE(after.num_seqs == before.num_seqs);
  apply(copies);
  // A fork's pending copy came first, and so did those of its own forks
  // still waiting for its rows.
  seq.readable = true;
  for (auto& [other, s] : live_)
    if (!s.readable && s.waiting_on == id) s.readable = true;
  seq.tokens.erase(seq.tokens.begin() + first, seq.tokens.begin() + first + n);
  seq.prefix.erase(seq.prefix.begin() + first, seq.prefix.begin() + first + n);
}

bool Harness::fork(uint64_t parent, uint64_t child) {
  const auto before = alloc_.usage();
  if (!alloc_.fork(parent, child)) {
    KV_REQUIRE(same_usage(before, alloc_.usage()));
    return false;
  }
  ShadowSeq seq = live_.at(parent);
  if (!traits_.copy_on_write) {
    // Its K/V arrives with its first extend's copy, from the range the
    // parent's own copy would have come from while that is still pending.
    if (seq.readable) seq.waiting_on = parent;
    seq.readable = false;
  }
  live_[child] = seq;
  return true;
}

ShadowSeq Harness::free(uint64_t id) {
  ShadowSeq seq = live_.at(id);
  live_.erase(id);
  alloc_.free_seq(id);
  KV_REQUIRE(table(id).empty());
  return seq;
}

void Harness::check() const {
  const auto u = alloc_.usage();
  const uint32_t bs = alloc_.block_size();
  KV_REQUIRE(u.num_seqs == live_.size());
  KV_REQUIRE(u.total_slots <= kv_.size());
  KV_REQUIRE(u.reserved_slots <= u.total_slots);
  KV_REQUIRE(u.cached_free_slots <= u.reserved_slots);
  KV_REQUIRE(u.largest_free_run <= u.total_slots - u.reserved_slots);

  std::unordered_map<uint32_t, uint64_t> owner;  // slot -> prefix it must hold
  std::set<int32_t> blocks;
  uint64_t sum_lengths = 0;
  for (const auto& [id, seq] : live_) {
    const auto t = table(id);
    const uint32_t len = static_cast<uint32_t>(seq.tokens.size());
    sum_lengths += len;
    KV_REQUIRE(t.size() == (traits_.paged ? (len + bs - 1) / bs : 1u));
    blocks.insert(t.begin(), t.end());
    // Plain comparisons in this hot loop; the first failure is named.
    for (uint32_t p = 0; p < len; ++p) {
      const uint32_t s = static_cast<uint32_t>(t[p / bs]) + p % bs;
      const std::string where =
          "sequence " + std::to_string(id) + " position " + std::to_string(p) + " slot " + std::to_string(s);
      if (s >= u.total_slots) throw Violation(where + ": the slot is past total_slots");
      auto [it, fresh] = owner.emplace(s, seq.prefix[p]);
      // Only copy-on-write allocators share slots, and only between
      // sequences whose K/V there is the same.
      const bool shared_ok = fresh || (traits_.copy_on_write && it->second == seq.prefix[p]);
      const bool content_ok = !seq.readable || (kv_[s].prefix == seq.prefix[p] && kv_[s].token == seq.tokens[p]);
      if (!shared_ok) throw Violation(where + ": the slot also serves a sequence with other K/V there");
      if (!content_ok) throw Violation(where + ": the slot does not hold this sequence's K/V");
    }
  }
  if (traits_.paged) {
    KV_REQUIRE(u.used_slots == owner.size());
    const uint64_t live_reserved = u.reserved_slots - u.cached_free_slots;
    KV_REQUIRE(live_reserved == blocks.size() * bs);
    // At most one partially filled block per sequence.
    KV_REQUIRE(live_reserved - u.used_slots <= live_.size() * (bs - 1));
  } else {
    KV_REQUIRE(u.used_slots == sum_lengths);
    KV_REQUIRE(u.cached_free_slots == 0);
  }
  if (!traits_.paged && !traits_.relocation) {
    // A range that can never move must be reserved whole, for the longest
    // the sequence may grow.
    uint64_t promised = 0;
    for (const auto& [id, seq] : live_) promised += seq.max_total;
    KV_REQUIRE(u.reserved_slots >= promised);
  }
  KV_REQUIRE(u.prefix_query_tokens == expected_.prefix_query_tokens);
  KV_REQUIRE(u.prefix_hit_tokens == expected_.prefix_hit_tokens);
  KV_REQUIRE(u.num_cow_copies == expected_.cow_copies);
  KV_REQUIRE(u.num_relocations == expected_.relocations);
  if (extra_check) extra_check(*this);
}

void run_workload(Harness& h, uint64_t seed, const Workload& w) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  auto random_tokens = [&](uint32_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(uniform(0, w.vocab - 1));
    return t;
  };
  std::vector<std::vector<int32_t>> prefixes;  // system prompts many requests share
  for (int i = 0; i < 4; ++i) prefixes.push_back(random_tokens(uniform(1, 3 * w.chunk)));
  std::vector<std::pair<uint64_t, ShadowSeq>> preempted;
  uint64_t next_id = 1;

  auto pick_live = [&]() {
    auto it = h.live().begin();
    std::advance(it, uniform(0, static_cast<uint32_t>(h.live().size()) - 1));
    return it->first;
  };
  auto preempt_one = [&]() {
    if (h.live().empty()) return;
    const uint64_t id = pick_live();
    ShadowSeq seq = h.free(id);
    if (preempted.size() < 16) preempted.emplace_back(id, std::move(seq));
  };

  for (uint32_t op = 0; op < w.num_ops; ++op) {
    const uint32_t r = uniform(0, 99);
    if (h.live().empty() || r < 22) {
      bool ok;
      if (!preempted.empty() && uniform(0, 2) == 0) {  // resume: prompt + what it generated
        const uint32_t i = uniform(0, static_cast<uint32_t>(preempted.size()) - 1);
        auto [id, seq] = preempted[i];
        ok = h.reserve(id, seq.tokens, seq.max_total);
        if (ok) preempted.erase(preempted.begin() + i);
      } else {
        std::vector<int32_t> prompt;
        if (uniform(0, 3) != 0) {
          const auto& p = prefixes[uniform(0, 3)];
          prompt.assign(p.begin(), p.begin() + uniform(1, static_cast<uint32_t>(p.size())));
        }
        const auto suffix = random_tokens(uniform(1, 2 * w.chunk));
        prompt.insert(prompt.end(), suffix.begin(), suffix.end());
        if (prompt.size() > w.max_seq_len - 1) prompt.resize(w.max_seq_len - 1);
        const uint32_t n = static_cast<uint32_t>(prompt.size());
        const uint32_t max_total = std::min(w.max_seq_len, n + uniform(1, 4 * w.chunk));
        ok = h.reserve(next_id++, prompt, max_total);
      }
      if (!ok) preempt_one();  // the scheduler makes room
    } else if (r < 70) {
      const uint64_t id = pick_live();
      const ShadowSeq& seq = h.live().at(id);
      const uint32_t room = std::min(seq.max_total, w.max_seq_len) - static_cast<uint32_t>(seq.tokens.size());
      if (room == 0) {
        h.free(id);  // finished: length
      } else {
        const uint32_t k = std::min(room, uniform(0, 3) == 0 ? uniform(1, w.chunk) : 1u);
        if (w.speculate && uniform(0, 2) == 0) {  // k drafts, some accepted, the rest rolled back
          if (!h.speculate(id, random_tokens(k), uniform(0, k))) preempt_one();
        } else if (!h.extend(id, random_tokens(k))) {
          preempt_one();
        }
      }
    } else if (w.evict && r < 74) {
      // A window's eviction: rows after the first block (the sinks) leave.
      const uint64_t id = pick_live();
      const uint32_t len = static_cast<uint32_t>(h.live().at(id).tokens.size());
      const uint32_t unit = h.traits().paged ? h.block_size() : 1u;
      if (len >= 3 * unit) {
        const uint32_t first = unit, max_n = (len - first) / unit;
        h.evict(id, first, unit * uniform(1, max_n));
      }
    } else if (r < 78 && w.allow_fork) {
      h.fork(pick_live(), next_id++);
    } else if (r < 90) {
      h.free(pick_live());  // finished: EOS or cancelled
    } else {
      preempt_one();
    }
    h.check();
  }
  while (!h.live().empty()) {
    h.free(h.live().begin()->first);
    h.check();
  }
}

}  // namespace kvtest
