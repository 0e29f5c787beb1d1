// KV allocator API 2.2 flush_cache through the loaded plugins: kv.paged drops
// exactly the cached blocks no live sequence holds and reports each removal;
// live sequences keep their blocks and their prefix hits. Allocators without
// a prefix cache, and plugins built against 2.1, have nothing to drop.
#include <catch2/catch.hpp>

#include <set>

#include "core/plugin_loader.hpp"
#include "scale_out/block_set.hpp"

using namespace llmk;
using kv_events_test::Rebuilt;

namespace {

constexpr uint32_t kBlock = 8;

llmk_kv_allocator_desc paged_desc(KvEventLog* log) {
  llmk_kv_allocator_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.num_slots = 40 * kBlock;
  desc.block_size = kBlock;
  desc.max_seq_len = 96;
  desc.enable_prefix_caching = 1;
  desc.options = "{}";
  desc.event_sink = &KvEventLog::sink;
  desc.event_sink_ctx = log;
  return desc;
}

// `num_blocks` full blocks of tokens starting at `first` (distinct runs for
// distinct `first`), then `tail` more tokens.
std::vector<int32_t> prompt(int32_t first, uint32_t num_blocks, uint32_t tail = 3) {
  std::vector<int32_t> out(num_blocks * kBlock + tail);
  for (size_t i = 0; i < out.size(); ++i) out[i] = first + static_cast<int32_t>(i);
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Reserves the whole prompt, commits it; returns the prefix-cache hit in tokens.
uint32_t start(KvAllocator& kv, uint64_t id, const std::vector<int32_t>& tokens) {
  const llmk_kv_reserve_args args{id, tokens.data(), static_cast<uint32_t>(tokens.size()), 96};
  uint32_t cached = 0;
  REQUIRE(kv.reserve(args, &cached));
  kv.commit_tokens(id, cached, tokens.data() + cached, static_cast<uint32_t>(tokens.size()) - cached);
  return cached;
}

std::vector<int32_t> table(const KvAllocator& kv, uint64_t id) {
  std::vector<int32_t> out;
  kv.block_table(id, out);
  return out;
}

}  // namespace

TEST_CASE("kv.paged's flush_cache drops exactly the unreferenced cached blocks and live sequences keep theirs",
          "[kv_events][flush_cache]") {
  PluginRegistry registry;
  KvEventLog log(1 << 16);
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), paged_desc(&log));
  REQUIRE(kv.info().api_version == LLMK_KV_ALLOCATOR_API_VERSION);

  const auto p1 = prompt(100, 4), p2 = prompt(500, 3);
  // Finished: p1's 4 blocks, and a sequence that hit p1's first 2 and added
  // a block of its own: 5 blocks cached, none held.
  start(kv, 1, p1);
  kv.free_seq(1);
  const auto p1_branch = concat(std::vector<int32_t>(p1.begin(), p1.begin() + 2 * kBlock), prompt(900, 1));
  CHECK(start(kv, 2, p1_branch) == 2 * kBlock);
  kv.free_seq(2);
  // Live: p2's 3 blocks, and a sequence sharing p2's first 2 with a block
  // of its own: 4 blocks cached and held.
  start(kv, 3, p2);
  const auto p2_branch = concat(std::vector<int32_t>(p2.begin(), p2.begin() + 2 * kBlock), prompt(1300, 1));
  CHECK(start(kv, 4, p2_branch) == 2 * kBlock);
  const auto table3 = table(kv, 3), table4 = table(kv, 4);

  Rebuilt rebuilt;
  for (const KvEvent& e : log.take(std::chrono::milliseconds(0))) rebuilt.apply(e);
  REQUIRE(rebuilt.blocks.size() == 9);
  REQUIRE(kv.usage().cached_free_slots == 5 * kBlock);

  CHECK(kv.flush_cache() == 5);
  const auto flushed = log.take(std::chrono::milliseconds(0));
  CHECK(flushed.size() == 5);
  for (const KvEvent& e : flushed) {
    CHECK(e.type == LLMK_KV_EVENT_BLOCK_REMOVED);
    rebuilt.apply(e);
  }
  CHECK(rebuilt.violations.empty());
  const auto held = kv.cached_blocks();
  REQUIRE(held);
  CHECK(held->size() == 4);
  CHECK(std::set<uint64_t>(held->begin(), held->end()) == rebuilt.hashes());
  CHECK(kv.usage().cached_free_slots == 0);

  // The live sequences keep their blocks and grow as before.
  CHECK(table(kv, 3) == table3);
  CHECK(table(kv, 4) == table4);
  std::vector<llmk_kv_copy> copies;
  REQUIRE(kv.extend(3, static_cast<uint32_t>(p2.size()) + 9, copies));
  const auto more = prompt(1700, 1, 1);
  kv.commit_tokens(3, static_cast<uint32_t>(p2.size()), more.data(), static_cast<uint32_t>(more.size()));
  const auto grown = table(kv, 3);
  REQUIRE(grown.size() == 5);
  CHECK(std::vector<int32_t>(grown.begin(), grown.begin() + 4) == table3);

  // Their prefixes still hit; the flushed ones no longer do.
  CHECK(start(kv, 5, concat(std::vector<int32_t>(p2.begin(), p2.begin() + 3 * kBlock), prompt(2100, 0, 2))) ==
        3 * kBlock);
  CHECK(start(kv, 6, p2_branch) == 3 * kBlock);
  CHECK(start(kv, 7, p1) == 0);
  CHECK(start(kv, 8, p1_branch) == 2 * kBlock);  // seq 7 registered p1 again

  // Nothing unheld is left: a second flush drops nothing and says nothing.
  for (const KvEvent& e : log.take(std::chrono::milliseconds(0))) rebuilt.apply(e);
  CHECK(kv.flush_cache() == 0);
  CHECK(log.take(std::chrono::milliseconds(0)).empty());
  for (uint64_t id : {3, 4, 5, 6, 7, 8}) kv.free_seq(id);
  const auto before = kv.cached_blocks();
  REQUIRE(before);
  CHECK(kv.flush_cache() == before->size());
  for (const KvEvent& e : log.take(std::chrono::milliseconds(0))) rebuilt.apply(e);
  CHECK(rebuilt.violations.empty());
  CHECK(rebuilt.blocks.empty());
  CHECK(kv.cached_blocks()->empty());
  CHECK(kv.usage().reserved_slots == 0);
}

TEST_CASE("allocators without a prefix cache drop nothing on flush_cache", "[kv_events][flush_cache]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.contiguous", "kv.vm");
  INFO(plugin);
  PluginRegistry registry;
  KvEventLog log(1 << 16);
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), paged_desc(&log));
  start(kv, 1, prompt(100, 2));
  kv.free_seq(1);
  CHECK(kv.flush_cache() == 0);
  CHECK(log.num_appended() == 0);
}

TEST_CASE("a kv allocator plugin built against API 2.1 loads without flush_cache and drops nothing",
          "[kv_events][flush_cache]") {
  PluginRegistry registry({LLMK_SCALE_OUT_FIXTURE_DIR});
  KvEventLog log(1 << 16);
  const Plugin plugin = registry.load("kv.paged21", LLMK_PLUGIN_KV_ALLOCATOR);
  CHECK(plugin.info().api_version == LLMK_API_VERSION(LLMK_KV_ALLOCATOR_API_MAJOR, 1));
  CHECK(plugin.kv_allocator().cached_blocks != nullptr);
  CHECK(plugin.kv_allocator().flush_cache == nullptr);  // the field 2.2 appended, defaulted
  KvAllocatorImpl kv(plugin, paged_desc(&log));
  start(kv, 1, prompt(100, 3));
  kv.free_seq(1);
  const auto held = kv.cached_blocks();
  REQUIRE(held);
  CHECK(held->size() == 3);
  const size_t num_events = log.take(std::chrono::milliseconds(0)).size();
  CHECK(num_events == 3);
  CHECK(kv.flush_cache() == 0);
  CHECK(kv.cached_blocks()->size() == 3);  // its cache is untouched
  CHECK(log.take(std::chrono::milliseconds(0)).empty());
  CHECK(start(kv, 2, prompt(100, 3)) == 3 * kBlock);
}

#ifdef LLMK_HAVE_ENGINE
#include "actors/engine_fixture.hpp"

namespace {

Request greedy(const std::string& id, std::vector<int32_t> ids, int32_t max_tokens) {
  Request r;
  r.id = id;
  r.prompt_token_ids = std::move(ids);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

}  // namespace

TEST_CASE("Engine::flush_cache on stories260K with kv.paged: finished prompts miss afterwards, a running request "
          "keeps its greedy text",
          "[flush_cache][engine]") {
  EngineConfig cfg = test::stories_config();  // kv.paged, blocks of 16
  REQUIRE(cfg.kv_cache.enable_prefix_caching);
  EngineOptions options;
  options.kv_events = std::make_shared<KvEventLog>(1 << 20);
  Engine engine(cfg, options);
  const auto golden = test::load_golden();
  const auto none = std::chrono::milliseconds(0);
  Rebuilt rebuilt;

  // A 58-token prompt: its second run hits its 3 full blocks.
  const auto& g = golden.at(2);
  auto repeated = g.input_ids;
  repeated.insert(repeated.end(), g.greedy_ids.begin(), g.greedy_ids.end());
  const auto first = test::run_one(engine, greedy("first", repeated, 4));
  CHECK(first.sample().usage.cached_prompt_tokens == 0);
  const auto second = test::run_one(engine, greedy("second", repeated, 4));
  CHECK(second.sample().usage.cached_prompt_tokens == 48);
  CHECK(second.sample().token_ids == first.sample().token_ids);
  // The long request alone, for its greedy ids (the first 48 are golden).
  const auto& lg = golden.at(3);  // 16-token prompt
  const int32_t long_tokens = 400;
  const auto reference = test::run_one(engine, greedy("reference", lg.input_ids, long_tokens));
  REQUIRE(reference.sample().token_ids.size() == static_cast<size_t>(long_tokens));
  CHECK(std::vector<int32_t>(reference.sample().token_ids.begin(), reference.sample().token_ids.begin() + 48) ==
        lg.greedy_ids);

  // Idle: every cached block is unheld, so all go, each published as removed.
  for (const KvEvent& e : options.kv_events->take(none)) rebuilt.apply(e);
  const uint64_t cached_free = engine.stats().kv.cached_free_slots;
  REQUIRE(cached_free > 0);
  const uint32_t num_dropped = engine.flush_cache();
  CHECK(num_dropped == cached_free / cfg.kv_cache.block_size);
  CHECK(num_dropped == rebuilt.blocks.size());
  const auto removals = options.kv_events->take(none);
  CHECK(removals.size() == num_dropped);
  for (const KvEvent& e : removals) {
    CHECK(e.type == LLMK_KV_EVENT_BLOCK_REMOVED);
    rebuilt.apply(e);
  }
  CHECK(rebuilt.violations.empty());
  CHECK(rebuilt.blocks.empty());
  CHECK(engine.stats().kv.cached_free_slots == 0);
  const auto third = test::run_one(engine, greedy("third", repeated, 4));
  CHECK(third.sample().usage.cached_prompt_tokens == 0);  // flushed: no prefix hit
  CHECK(third.sample().token_ids == first.sample().token_ids);

  // While the long request runs: its blocks stay, "third"'s go. The flush
  // is sent once its first tokens are out; should it still finish first (a
  // loaded machine), it runs again, every run checked.
  std::vector<int32_t> live_ids;
  bool flushed_while_running = false;
  for (int attempt = 0; attempt < 5 && !flushed_while_running; ++attempt) {
    const std::string id = "live" + std::to_string(attempt);
    auto stream = engine.submit(greedy(id, lg.input_ids, long_tokens));
    auto ev = stream->next(std::chrono::seconds(20));
    REQUIRE(ev);
    live_ids = ev->token_ids;
    const uint32_t num_dropped_live = engine.flush_cache();
    flushed_while_running = engine.stats().num_running == 1;  // running before the flush, and after it
    if (attempt == 0) CHECK(num_dropped_live >= 3);  // "third"'s full prompt blocks at least
    while (!ev->request_done) {
      ev = stream->next(std::chrono::seconds(20));
      REQUIRE(ev);
      live_ids.insert(live_ids.end(), ev->token_ids.begin(), ev->token_ids.end());
    }
    CHECK(ev->finish_reason == FinishReason::length);
    CHECK(live_ids == reference.sample().token_ids);
  }
  CHECK(flushed_while_running);
  // Its prompt block, held through the flush, still starts a hit.
  auto continued = lg.input_ids;
  continued.insert(continued.end(), live_ids.begin(), live_ids.begin() + 20);
  CHECK(test::run_one(engine, greedy("continued", continued, 2)).sample().usage.cached_prompt_tokens == 32);
}
#endif
