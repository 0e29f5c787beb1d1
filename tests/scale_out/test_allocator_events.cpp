// The allocators' prefix-cache events against their own state: replaying the
// events from an empty set must give exactly the blocks the allocator holds,
// after every operation of random workloads with evictions, forks,
// preemptions and (with few hash bits) hash collisions.
#include <catch2/catch.hpp>

#include <random>

#include "core/plugin_loader.hpp"
#include "scale_out/block_set.hpp"
#include "plugins/kv_paged/paged_allocator.hpp"

using namespace llmk;
using kv_events_test::Rebuilt;

namespace {

// The registered blocks as PagedAllocator's introspection sees them.
std::map<uint64_t, std::vector<int32_t>> registered(const kv::PagedAllocator& a) {
  std::map<uint64_t, std::vector<int32_t>> out;
  for (uint32_t b = 0; b < a.num_blocks(); ++b)
    if (a.is_cached(b)) out.emplace(a.cached_hash(b), a.cached_tokens(b));
  return out;
}

llmk_kv_allocator_desc desc_with_sink(uint32_t num_slots, const char* options, KvEventLog* log) {
  llmk_kv_allocator_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.num_slots = num_slots;
  desc.block_size = 8;
  desc.max_seq_len = 96;
  desc.enable_prefix_caching = 1;
  desc.options = options;
  desc.event_sink = &KvEventLog::sink;
  desc.event_sink_ctx = log;
  return desc;
}

}  // namespace

TEST_CASE("kv.paged's events rebuild its registered blocks after every operation of a random workload",
          "[kv_events]") {
  const char* options = GENERATE("{}", R"({"hash_bits":5})");  // 5 bits: collisions replace registrations
  INFO("options " << options);
  KvEventLog log(1 << 20);
  kv::PagedAllocator alloc(desc_with_sink(40 * 8, options, &log));
  Rebuilt rebuilt;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(1, 6), pick(0, 99);
  std::vector<std::vector<int32_t>> prefixes(5);
  for (auto& p : prefixes) {
    p.resize(8 * (1 + pick(rng) % 4));
    for (auto& t : p) t = tok(rng);
  }
  struct Live {
    std::vector<int32_t> tokens;
    uint32_t committed = 0;
  };
  std::map<uint64_t, Live> live;
  uint64_t next_id = 1;
  uint64_t num_removed = 0, num_stored = 0;
  for (int op = 0; op < 4000; ++op) {
    const int what = pick(rng);
    if (what < 30 || live.empty()) {  // a new prompt, often over a shared prefix
      Live seq;
      if (pick(rng) < 70) seq.tokens = prefixes[pick(rng) % prefixes.size()];
      for (int k = 1 + pick(rng) % 20; k > 0; --k) seq.tokens.push_back(tok(rng));
      const llmk_kv_reserve_args args{next_id, seq.tokens.data(), uint32_t(seq.tokens.size()), 96};
      uint32_t cached = 0;
      if (alloc.reserve(args, &cached) == LLMK_OK) {
        seq.committed = cached;
        live.emplace(next_id, std::move(seq));
      }
      ++next_id;
    } else {
      auto it = std::next(live.begin(), pick(rng) % live.size());
      Live& seq = it->second;
      if (what < 70) {  // compute what is reserved, then decode one token
        alloc.commit_tokens(it->first, seq.committed, seq.tokens.data() + seq.committed,
                            uint32_t(seq.tokens.size()) - seq.committed);
        seq.committed = uint32_t(seq.tokens.size());
        if (seq.tokens.size() < 96) {
          llmk_kv_copy copy;
          uint32_t num_copies = 0;
          if (alloc.extend(it->first, uint32_t(seq.tokens.size()) + 1, &copy, 1, &num_copies) == LLMK_OK)
            seq.tokens.push_back(tok(rng));
        }
      } else if (what < 78) {  // a fork (n > 1)
        if (alloc.fork(it->first, next_id) == LLMK_OK) live.emplace(next_id, seq);
        ++next_id;
      } else if (what < 90) {  // finished
        alloc.free_seq(it->first);
        live.erase(it);
      } else {  // preempted for recompute: freed, then reserved again with what it has
        const std::vector<int32_t> tokens = seq.tokens;
        alloc.free_seq(it->first);
        live.erase(it);
        const llmk_kv_reserve_args args{next_id, tokens.data(), uint32_t(tokens.size()), 96};
        uint32_t cached = 0;
        if (alloc.reserve(args, &cached) == LLMK_OK) live.emplace(next_id, Live{tokens, cached});
        ++next_id;
      }
    }
    for (const KvEvent& e : log.take(std::chrono::milliseconds(0))) {
      rebuilt.apply(e);
      (e.type == LLMK_KV_EVENT_BLOCK_STORED ? num_stored : num_removed) += 1;
    }
    REQUIRE(rebuilt.violations.empty());
    REQUIRE(rebuilt.blocks == registered(alloc));
  }
  CHECK(num_stored > 100);
  CHECK(num_removed > 50);  // evictions (and, with 5 bits, replaced registrations) happened
  CHECK(log.num_dropped() == 0);
  std::vector<uint64_t> hashes(rebuilt.blocks.size() + 1);
  REQUIRE(alloc.cached_blocks(hashes.data(), uint32_t(hashes.size())) == rebuilt.blocks.size());
}

TEST_CASE("through the loaded kv.paged plugin, the scheduler's workload leaves events that rebuild cached_blocks()",
          "[kv_events]") {
  PluginRegistry registry;
  KvEventLog log(1 << 20);
  const uint32_t num_slots = 4 * 96;
  auto desc = desc_with_sink(num_slots, "{}", &log);
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  sched_test::FakeModel model(num_slots);
  Rebuilt rebuilt;
  size_t num_steps = 0, num_nonempty = 0;
  const SchedulerStats stats =
      kv_events_test::run_jobs(kv, model, 96, kv_events_test::shared_prefix_jobs(3, 80), [&] {
        for (const KvEvent& e : log.take(std::chrono::milliseconds(0))) rebuilt.apply(e);
        REQUIRE(rebuilt.violations.empty());
        const auto held = kv.cached_blocks();
        REQUIRE(held);
        REQUIRE(std::set<uint64_t>(held->begin(), held->end()) == rebuilt.hashes());
        ++num_steps;
        num_nonempty += held->empty() ? 0 : 1;
      });
  CHECK(stats.num_preemptions > 0);
  CHECK(stats.num_cached_prompt_tokens > 0);
  CHECK(num_nonempty > num_steps / 2);
}

TEST_CASE("allocators without a prefix cache report no blocks and emit no events", "[kv_events]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.contiguous", "kv.vm");
  INFO(plugin);
  PluginRegistry registry;
  KvEventLog log(1 << 20);
  const uint32_t num_slots = 4 * 96;
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), desc_with_sink(num_slots, "{}", &log));
  CHECK_FALSE(kv.cached_blocks().has_value());
  sched_test::FakeModel model(num_slots);
  kv_events_test::run_jobs(kv, model, 96, kv_events_test::shared_prefix_jobs(4, 20), [] {});
  CHECK(log.num_appended() == 0);
}

TEST_CASE("a full event log drops and counts what does not fit, keeping the order of what it kept", "[kv_events]") {
  KvEventLog log(3);
  for (uint64_t h = 1; h <= 5; ++h) log.append(KvEvent{LLMK_KV_EVENT_BLOCK_REMOVED, h, std::nullopt, {}});
  const auto taken = log.take(std::chrono::milliseconds(0));
  REQUIRE(taken.size() == 3);
  CHECK(taken[0].block_hash == 1);
  CHECK(taken[2].block_hash == 3);
  CHECK(log.num_dropped() == 2);
  CHECK(log.num_appended() == 3);
}

TEST_CASE("a kv allocator plugin built against API 2.0 loads, serves, and lists no cached blocks", "[kv_events]") {
  PluginRegistry registry({LLMK_SCALE_OUT_FIXTURE_DIR});
  KvEventLog log(1 << 20);
  const uint32_t num_slots = 4 * 96;
  const Plugin plugin = registry.load("kv.pagedold", LLMK_PLUGIN_KV_ALLOCATOR);
  CHECK(plugin.info().api_version == LLMK_API_VERSION(LLMK_KV_ALLOCATOR_API_MAJOR, 0));
  CHECK(plugin.kv_allocator().cached_blocks == nullptr);  // the field 2.1 appended, defaulted
  KvAllocatorImpl kv(plugin, desc_with_sink(num_slots, "{}", &log));
  CHECK_FALSE(kv.cached_blocks().has_value());
  sched_test::FakeModel model(num_slots);
  const SchedulerStats stats =
      kv_events_test::run_jobs(kv, model, 96, kv_events_test::shared_prefix_jobs(5, 30), [] {});
  CHECK(stats.num_cached_prompt_tokens > 0);  // its prefix cache works as before
}
