// A shadow model for KV allocators: it plays the host (applies the copies an
// allocator returns, writes every new token's "K/V" into a simulated cache)
// and checks, after every operation, what any allocator must guarantee:
// every live sequence reads exactly its own history through its block table,
// no slot serves two sequences unless both hold the same prefix there, and
// usage() agrees with counts the model makes itself.
//
// The simulated K/V of position p is (hash of tokens[0..p], tokens[p]): it
// depends on the whole prefix, as real K/V does, so a prefix-cache hit that
// returns a block computed after a different prefix is caught.
//
// What an allocator promises beyond that comes from its capabilities JSON
// (KvTraits), never from knowing which allocator it is: a new allocator is
// checked by what it declares. A broken guarantee throws Violation naming
// the check: a test sees an unexpected exception, the conformance suite a
// failed case.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/kv_allocator.hpp"
#include "plugins/api/plugin_helpers.hpp"

namespace kvtest {

// A guarantee the allocator broke: the check, and where it failed.
class Violation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

#define KV_REQUIRE(cond)                                                                      \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::kvtest::Violation(std::string("kv_harness:") + std::to_string(__LINE__) + ": " #cond); \
  } while (0)
#define KV_REQUIRE_FALSE(cond) KV_REQUIRE(!(cond))

// The guarantees an allocator declares in its capabilities JSON.
struct KvTraits {
  // "block_size": {"min", "max"}: fixed-size blocks of the desc's size, one
  // table entry per block. Otherwise ("max_seq_len") one range per sequence.
  bool paged = false;
  bool prefix_caching = false;  // "prefix_caching": true
  // "copy_on_write": true: a fork shares the parent's slots and a write into
  // a shared partial block copies it first. Otherwise a fork's child gets
  // its own range, filled by one copy with its first extend.
  bool copy_on_write = false;
  // "relocation": true: an extend may move a sequence (one copy of its K/V).
  bool relocation = false;

  // Throws std::invalid_argument naming what is malformed.
  static KvTraits from_capabilities(std::string_view capabilities_json);
};

// The traits an allocator class declares (its kCapabilities).
template <class A>
KvTraits traits_of() {
  return KvTraits::from_capabilities(A::kCapabilities);
}

struct SlotValue {
  uint64_t prefix = 0;  // hash of the whole prefix up to and including this token
  int32_t token = -1;
};

inline uint64_t next_prefix(uint64_t h, int32_t token) {
  uint64_t x = h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct ShadowSeq {
  std::vector<int32_t> tokens;   // history; its length is the allocator's length
  std::vector<uint64_t> prefix;  // prefix[p]: K/V stand-in of position p
  uint32_t max_total = 0;
  bool readable = true;  // false between a deferred fork and the child's first extend
  uint64_t waiting_on = 0;  // while not readable: whose range its copy reads (evicting that one delivers it)
};

// Counters the allocator must report, counted by the model from what it observed.
struct Expected {
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t cow_copies = 0;
  uint64_t relocations = 0;
};

// Drives an allocator class directly, as KvAllocatorImpl drives a loaded one.
template <class A>
class Direct final : public llmk::KvAllocator {
 public:
  explicit Direct(const llmk_kv_allocator_desc& desc) : impl(desc) {}
  bool reserve(const llmk_kv_reserve_args& args, uint32_t* cached) override { return ok(impl.reserve(args, cached)); }
  bool extend(uint64_t id, uint32_t n, std::vector<llmk_kv_copy>& out) override {
    llmk_kv_copy copies[16];
    uint32_t num = 0;
    const bool r = ok(impl.extend(id, n, copies, 16, &num));
    out.insert(out.end(), copies, copies + num);
    return r;
  }
  bool fork(uint64_t parent, uint64_t child) override { return ok(impl.fork(parent, child)); }
  void free_seq(uint64_t id) override { impl.free_seq(id); }
  void commit_tokens(uint64_t id, uint32_t first, const int32_t* t, uint32_t n) override {
    impl.commit_tokens(id, first, t, n);
  }
  uint32_t block_table(uint64_t id, std::vector<int32_t>& out) const override {
    const uint32_t n = impl.block_table(id, nullptr, 0);
    const size_t old = out.size();
    out.resize(old + n);
    return impl.block_table(id, out.data() + old, n);
  }
  uint32_t block_size() const override { return impl.block_size(); }
  bool can_truncate() const override { return true; }
  void truncate_seq(uint64_t id, uint32_t n) override { impl.truncate_seq(id, n); }
  bool can_evict() const override { return true; }
  void evict_tokens(uint64_t id, uint32_t first, uint32_t n, uint32_t length, std::vector<llmk_kv_copy>& out) override {
    llmk_kv_usage u{};
    impl.usage(u);
    std::vector<llmk_kv_copy> copies(length / n + 2 + u.num_seqs);
    uint32_t num = 0;
    impl.evict_tokens(id, first, n, copies.data(), static_cast<uint32_t>(copies.size()), &num);
    KV_REQUIRE(num <= copies.size());
    out.insert(out.end(), copies.begin(), copies.begin() + num);
  }
  llmk_kv_usage usage() const override {
    llmk_kv_usage u{};
    impl.usage(u);
    return u;
  }
  A impl;

 private:
  static bool ok(llmk_status s) {
    if (s == LLMK_ERR_NO_SPACE) return false;
    KV_REQUIRE(s == LLMK_OK);
    return true;
  }
};

inline bool same_usage(const llmk_kv_usage& a, const llmk_kv_usage& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

class Harness {
 public:
  Harness(llmk::KvAllocator& alloc, KvTraits traits, uint32_t num_slots, bool prefix_caching)
      : alloc_(alloc), traits_(traits), prefix_caching_(prefix_caching && traits.prefix_caching), kv_(num_slots) {}

  // Introspection checks for a directly driven allocator, run after check().
  std::function<void(const Harness&)> extra_check;

  bool reserve(uint64_t id, const std::vector<int32_t>& tokens, uint32_t max_total, uint32_t* cached_out = nullptr);
  bool extend(uint64_t id, const std::vector<int32_t>& new_tokens);
  bool fork(uint64_t parent, uint64_t child);
  // A speculative step: the sequence grows by `drafts` (their K/V written,
  // as a verification step writes it), the model accepts the first
  // `num_accepted`, only those are committed, and the allocator rolls the
  // rest back (truncate_seq). False, nothing changed, when the growth finds
  // no space.
  bool speculate(uint64_t id, const std::vector<int32_t>& drafts, uint32_t num_accepted);
  // StreamingLLM: positions [first, first + n) leave the sequence
  // (evict_tokens), the later ones move down. A paged allocator drops whole
  // blocks and copies nothing; a range stays where it is and its copies
  // move the rows (disjoint, in order). What the sequence commits afterwards
  // must never serve another prompt: the simulated K/V of a shifted row
  // carries its original prefix, which no prompt's hash chain reproduces.
  void evict(uint64_t id, uint32_t first, uint32_t n);
  ShadowSeq free(uint64_t id);
  void check() const;

  const std::map<uint64_t, ShadowSeq>& live() const { return live_; }
  const std::vector<SlotValue>& kv() const { return kv_; }
  std::vector<int32_t> table(uint64_t id) const {
    std::vector<int32_t> t;
    alloc_.block_table(id, t);
    return t;
  }
  uint32_t slot(const std::vector<int32_t>& table, uint32_t p) const {
    const uint32_t bs = alloc_.block_size();
    KV_REQUIRE(p / bs < table.size());
    return static_cast<uint32_t>(table[p / bs]) + p % bs;
  }
  const KvTraits& traits() const { return traits_; }
  uint32_t block_size() const { return alloc_.block_size(); }
  const Expected& expected() const { return expected_; }

 private:
  // Writes K/V of positions [from, length) and commits the first num_commit of them.
  void write(uint64_t id, uint32_t from, uint32_t num_commit = UINT32_MAX);
  void apply(const std::vector<llmk_kv_copy>& copies);
  bool grow(uint64_t id, const std::vector<int32_t>& new_tokens, uint32_t num_commit);

  llmk::KvAllocator& alloc_;
  KvTraits traits_;
  bool prefix_caching_;
  std::vector<SlotValue> kv_;  // [num_slots]: the simulated cache
  std::map<uint64_t, ShadowSeq> live_;
  Expected expected_;
};

// Random scheduler-like workloads: reserve (new or resumed after
// preemption), extend by one token or a chunk, fork, finish, preempt.
struct Workload {
  uint32_t num_ops = 3000;
  uint32_t max_seq_len = 128;
  uint32_t vocab = 3;       // tiny: prompts share blocks, hashes see equal contents
  uint32_t chunk = 16;      // longest extend
  bool allow_fork = true;
  bool speculate = false;   // some extends are speculative steps (needs truncate_seq)
  bool evict = false;       // some sequences drop rows after their first block (needs evict_tokens)
};
void run_workload(Harness& h, uint64_t seed, const Workload& w);

}  // namespace kvtest
