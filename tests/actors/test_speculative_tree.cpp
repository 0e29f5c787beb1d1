// Token trees (speculative.tree_width > 1) through the Engine on
// stories260K: greedy outputs equal the float64 golden greedy ids, and
// every event equals plain decoding's, alone and in mixed continuous
// batches (prefills, plain decodes, sampled requests drafting trees,
// requests with penalties drafting chains), under every KV allocator, with
// the dense and int8 linear plugins.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <utility>

#include "engine_fixture.hpp"
#include "support/speculation_config.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

EngineConfig tree_config(EngineConfig cfg, uint32_t width) { return with_ngram_speculation(std::move(cfg), width); }

// The golden requests, fillers (greedy and sampled), and golden prompts
// with a repetition penalty (which verify chains), shuffled.
std::vector<Request> mixed(const std::vector<GoldenCase>& golden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> requests = golden_and_fillers(golden, 10, rng);
  for (size_t i = 0; i < golden.size(); i += 2) {
    Request r = golden_request(golden[i], "penalised-" + std::to_string(i));
    r.sampling.repetition_penalty = 1.2f;
    requests.push_back(std::move(r));
  }
  std::shuffle(requests.begin(), requests.end(), rng);
  return requests;
}

}  // namespace

TEST_CASE("with token trees every request decodes as with speculation off, under every allocator and with the "
          "dense and int8 linear plugins, alone and in a mixed batch",
          "[engine][speculative][tree]") {
  const auto golden = load_golden();
  const std::vector<Request> requests = mixed(golden, 17);
  for (const char* linear : {"linear.dense", "linear.int8"}) {
    EngineConfig base = stories_config();
    base.plugins.linear = linear;
    base.kv_cache.capacity_tokens = 4096;
    base.kv_cache.block_size = 8;
    base.scheduler.max_num_batched_tokens = 48;  // chunked prefill beside the verification rows
    std::map<std::string, RequestResult> plain;
    {
      Engine engine(base);
      plain = run_all(engine, requests);
    }
    uint64_t chain_nodes = 0;
    {
      Engine engine(tree_config(base, 1));
      run_all(engine, requests);
      chain_nodes = engine.stats().num_spec_draft_tokens;
    }
    for (const char* allocator : {"kv.contiguous", "kv.paged", "kv.vm"}) {
      INFO(linear << ", " << allocator);
      EngineConfig cfg = tree_config(base, 3);
      cfg.plugins.kv_allocator = allocator;
      Engine engine(cfg);
      if (std::string(linear) == "linear.dense") {
        for (size_t i = 0; i < golden.size(); ++i) {
          INFO("golden case " << i << " alone");
          const auto alone = run_all(engine, {golden_request(golden[i], "alone")});
          CHECK(alone.at("alone").sample().token_ids == golden[i].greedy_ids);
        }
      }
      const auto spec = run_all(engine, requests);
      REQUIRE(spec.size() == plain.size());
      for (const auto& [id, a] : plain) {
        INFO("request " << id);
        const RequestResult& b = spec.at(id);
        CHECK(b.violations.empty());
        CHECK(b.num_done_events == 1);
        // Sampled fillers draw other numbers with speculation on: their
        // distribution is the target's (test_core "[speculation][tree][sampler]").
        const auto request = std::find_if(requests.begin(), requests.end(), [&](const Request& r) { return r.id == id; });
        REQUIRE(request != requests.end());
        if (request->sampling.temperature > 0) continue;
        CHECK(b.sample().token_ids == a.sample().token_ids);
        CHECK(b.sample().finish_reason == a.sample().finish_reason);
      }
      if (std::string(linear) == "linear.dense")  // int8 rounding departs from the float64 golden ids
        for (size_t i = 0; i < golden.size(); ++i)
          CHECK(spec.at("golden-" + std::to_string(i)).sample().token_ids == golden[i].greedy_ids);
      const EngineStats stats = engine.stats();
      CHECK(stats.num_spec_drafts > 0);
      CHECK(stats.num_spec_accepted_tokens > 0);
      CHECK(stats.num_spec_draft_tokens > chain_nodes);  // trees draft more than chains
      CHECK(stats.kv.used_slots == 0);
    }
  }
}

TEST_CASE("sampled requests draft trees too, and a seed gives the same output alone and among other requests",
          "[engine][speculative][tree][sampling]") {
  const auto golden = load_golden();
  std::vector<Request> sampled;
  for (size_t i = 0; i < golden.size(); ++i) {
    Request r = golden_request(golden[i], "s" + std::to_string(i));
    r.sampling.temperature = 0.3f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 300 + i;
    sampled.push_back(std::move(r));
  }
  Engine engine(tree_config(stories_config(), 3));
  std::map<std::string, RequestResult> alone;
  for (const Request& r : sampled) alone.insert(*run_all(engine, {r}).begin());
  CHECK(engine.stats().num_spec_accepted_tokens > 0);
  std::mt19937 rng(4);
  std::vector<Request> crowd = sampled;
  for (int i = 0; i < 10; ++i) crowd.push_back(filler_request(rng, "other-" + std::to_string(i)));
  std::shuffle(crowd.begin(), crowd.end(), rng);
  const auto together = run_all(engine, crowd);
  for (const Request& r : sampled) {
    INFO(r.id);
    CHECK(together.at(r.id).violations.empty());
    CHECK(together.at(r.id).sample().token_ids == alone.at(r.id).sample().token_ids);
  }
  CHECK(engine.stats().kv.used_slots == 0);
}
