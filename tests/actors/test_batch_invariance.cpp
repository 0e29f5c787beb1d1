// Greedy outputs through the Engine do not depend on what else is in the
// batch, on arrival order, or on preemption: they equal the float64 golden
// greedy ids of stories260K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <thread>

#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

// Submits the golden requests mixed with `num_others` fillers in a random
// order with random small gaps; returns the golden results by case index.
std::vector<RequestResult> run_mixed(Engine& engine, const std::vector<GoldenCase>& golden, int num_others,
                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> requests = golden_and_fillers(golden, num_others, rng);
  Collector collector;
  for (auto& r : requests) {
    engine.submit(std::move(r), collector.callback());
    if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  REQUIRE(collector.wait_done(requests.size(), std::chrono::seconds(60)));
  auto results = collector.results();
  std::vector<RequestResult> out;
  for (size_t i = 0; i < golden.size(); ++i) out.push_back(results.at("golden-" + std::to_string(i)));
  for (const auto& [id, r] : results) {
    INFO(id);
    CHECK(r.violations.empty());
    CHECK(r.num_done_events == 1);
    CHECK(r.sample().finish_reason != FinishReason::error);
  }
  return out;
}

void check_golden(const std::vector<GoldenCase>& golden, const std::vector<RequestResult>& results) {
  for (size_t i = 0; i < golden.size(); ++i) {
    INFO("golden case " << i << ": '" << golden[i].prompt << "'");
    const SampleResult& s = results[i].sample();
    CHECK(s.finish_reason == FinishReason::length);
    CHECK(s.token_ids == golden[i].greedy_ids);
    CHECK(s.usage.prompt_tokens == static_cast<int32_t>(golden[i].input_ids.size()));
    CHECK(s.usage.completion_tokens == static_cast<int32_t>(golden[i].greedy_ids.size()));
  }
}

}  // namespace

TEST_CASE("greedy outputs of the golden prompts alone equal the float64 golden greedy ids", "[engine][golden]") {
  auto golden = load_golden();
  Engine engine(stories_config());
  for (size_t i = 0; i < golden.size(); ++i) {
    Collector collector;
    engine.submit(golden_request(golden[i], "alone"), collector.callback());
    REQUIRE(collector.wait_done(1, std::chrono::seconds(20)));
    check_golden({golden[i]}, {collector.results().at("alone")});
    // Text prompts decode to the golden text (the prompt's own tokens).
    if (golden[i].prompt.empty()) CHECK(collector.results().at("alone").sample().text == golden[i].greedy_text);
  }
}

TEST_CASE("greedy outputs are identical with 1, 8 and 64 other concurrent requests in random order",
          "[engine][golden]") {
  auto golden = load_golden();
  Engine engine(stories_config());
  for (int num_others : {1, 8, 64}) {
    INFO("with " << num_others << " other requests");
    check_golden(golden, run_mixed(engine, golden, num_others, 1000u + static_cast<uint32_t>(num_others)));
  }
  EngineStats stats = engine.stats();
  CHECK(stats.peak_running > 8);
  CHECK(stats.num_running == 0);
  CHECK(stats.kv.used_slots == 0);
}

TEST_CASE("a KV budget that forces preemption still gives every request its golden greedy output",
          "[engine][golden][preemption]") {
  auto golden = load_golden();
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    EngineConfig cfg = stories_config();
    cfg.kv_cache.capacity_tokens = 256;  // 16 blocks of 16; each golden request needs up to 4
    cfg.kv_cache.enable_prefix_caching = false;
    cfg.scheduler.preemption = mode;
    Engine engine(cfg);
    check_golden(golden, run_mixed(engine, golden, 8, 7));
    EngineStats stats = engine.stats();
    CHECK(stats.num_preemptions > 0);
    CHECK(stats.kv.used_slots == 0);
    CHECK(stats.num_requests_finished == stats.num_requests_total);
  }
}

TEST_CASE("greedy outputs are identical under every KV allocator, with prefix caching on and off, and with n > 1",
          "[engine][golden][allocators]") {
  auto golden = load_golden();
  for (const char* allocator : {"kv.contiguous", "kv.paged", "kv.vm"}) {
    for (bool prefix_caching : {false, true}) {
      INFO(allocator << (prefix_caching ? " with" : " without") << " prefix caching");
      EngineConfig cfg = stories_config();
      cfg.plugins.kv_allocator = allocator;
      cfg.kv_cache.enable_prefix_caching = prefix_caching;
      cfg.kv_cache.capacity_tokens = 4096;  // 8 maximum-length sequences for kv.contiguous
      cfg.kv_cache.block_size = 8;          // golden prompts of 10-16 tokens fill a block the cache can share
      Engine engine(cfg);
      // Twice: the second round finds the first round's prompts in the prefix cache.
      for (int round = 0; round < 2; ++round) check_golden(golden, run_mixed(engine, golden, 8, 50u + round));
      // n = 2 greedy samples share one prefill and both equal the golden ids.
      Collector collector;
      for (size_t i = 0; i < golden.size(); ++i) {
        Request r = golden_request(golden[i], "n2-" + std::to_string(i));
        r.sampling.n = 2;
        engine.submit(std::move(r), collector.callback());
      }
      REQUIRE(collector.wait_done(golden.size(), std::chrono::seconds(60)));
      const auto results = collector.results();
      for (size_t i = 0; i < golden.size(); ++i) {
        const RequestResult& r = results.at("n2-" + std::to_string(i));
        REQUIRE(r.samples.size() == 2);
        CHECK(r.sample(0).token_ids == golden[i].greedy_ids);
        CHECK(r.sample(1).token_ids == golden[i].greedy_ids);
      }
      const EngineStats stats = engine.stats();
      CHECK(stats.kv.used_slots == 0);
      if (prefix_caching && std::string(allocator) == "kv.paged") CHECK(stats.kv.prefix_hit_tokens > 0);
    }
  }
}

TEST_CASE("overlapped steps give every request exactly what one step in flight gives: tokens, logprobs, endings",
          "[engine][overlap]") {
  // Seeded sampling, greedy, n > 1, logprobs, EOS and stop strings: rows of
  // sequences that end while the next step is already planned are discarded,
  // never streamed.
  std::mt19937 rng(77);
  std::vector<Request> requests;
  for (int i = 0; i < 40; ++i) {
    Request r = filler_request(rng, "r" + std::to_string(i));
    if (i % 7 == 0) r.sampling.n = 2;
    if (i % 5 == 0) r.sampling.logprobs = 2;
    if (i % 6 == 0) r.sampling.stop = {"the"};
    requests.push_back(r);
  }
  auto run_all = [&](bool overlap) {
    EngineConfig cfg = stories_config();
    cfg.scheduler.overlap = overlap;
    cfg.scheduler.max_num_seqs = 16;
    Engine engine(cfg);
    Collector collector;
    for (const Request& r : requests) engine.submit(r, collector.callback());
    REQUIRE(collector.wait_done(requests.size(), std::chrono::seconds(60)));
    EngineStats stats = engine.stats();
    CHECK(stats.kv.used_slots == 0);
    CHECK(stats.num_running == 0);
    return collector.results();
  };
  const auto one_in_flight = run_all(false);
  const auto overlapped = run_all(true);
  int num_stopped = 0;
  for (const Request& r : requests) {
    INFO("request " << r.id);
    const RequestResult& a = one_in_flight.at(r.id);
    const RequestResult& b = overlapped.at(r.id);
    CHECK(b.violations.empty());
    CHECK(b.num_done_events == 1);
    REQUIRE(a.samples.size() == b.samples.size());
    for (const auto& [index, s] : a.samples) {
      INFO("sample " << index);
      const SampleResult& t = b.sample(index);
      CHECK(t.token_ids == s.token_ids);
      CHECK(t.text == s.text);
      CHECK(t.finish_reason == s.finish_reason);
      CHECK(t.usage.completion_tokens == s.usage.completion_tokens);
      REQUIRE(t.logprobs.size() == s.logprobs.size());
      for (size_t k = 0; k < s.logprobs.size(); ++k) CHECK(t.logprobs[k].logprob == s.logprobs[k].logprob);
      num_stopped += s.finish_reason == FinishReason::stop;
    }
  }
  CHECK(num_stopped > 0);  // some ended early (EOS or a stop string) while a step was planned ahead
}
