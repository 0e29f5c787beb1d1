// Speculative decoding (speculative.method ngram) through the Engine on
// stories260K: greedy outputs equal the float64 golden greedy ids, and every
// event (ids, text, logprobs, endings) equals what plain decoding gives,
// alone and in mixed continuous batches (chunked prefill, preemption,
// sampled requests beside speculating ones), under every KV allocator and
// with every CPU linear plugin.
#include <catch2/catch.hpp>

#include <random>

#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

EngineConfig speculative(EngineConfig cfg, uint32_t k = 4) {
  cfg.speculative.method = "ngram";
  cfg.speculative.num_tokens = k;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  return cfg;
}

// The golden requests and `num_others` fillers, shuffled by `seed`.
std::vector<Request> mixed(const std::vector<GoldenCase>& golden, int num_others, uint32_t seed) {
  std::mt19937 rng(seed);
  return golden_and_fillers(golden, num_others, rng);
}

void check_golden(const std::vector<GoldenCase>& golden, const std::map<std::string, RequestResult>& results) {
  for (size_t i = 0; i < golden.size(); ++i) {
    INFO("golden case " << i << ": '" << golden[i].prompt << "'");
    const RequestResult& r = results.at("golden-" + std::to_string(i));
    CHECK(r.violations.empty());
    CHECK(r.sample().finish_reason == FinishReason::length);
    CHECK(r.sample().token_ids == golden[i].greedy_ids);
    CHECK(r.sample().usage.completion_tokens == static_cast<int32_t>(golden[i].greedy_ids.size()));
  }
  for (const auto& [id, r] : results) {
    INFO(id);
    CHECK(r.num_done_events == 1);
    CHECK(r.sample().finish_reason != FinishReason::error);
  }
}

// Every sample's events agree: ids, text, ending, usage, logprobs.
void check_same(const std::map<std::string, RequestResult>& plain, const std::map<std::string, RequestResult>& spec) {
  REQUIRE(plain.size() == spec.size());
  for (const auto& [id, a] : plain) {
    INFO("request " << id);
    const RequestResult& b = spec.at(id);
    CHECK(b.violations.empty());
    CHECK(b.num_done_events == 1);
    REQUIRE(a.samples.size() == b.samples.size());
    for (const auto& [index, s] : a.samples) {
      const SampleResult& t = b.sample(index);
      CHECK(t.token_ids == s.token_ids);
      CHECK(t.text == s.text);
      CHECK(t.finish_reason == s.finish_reason);
      CHECK(t.usage.completion_tokens == s.usage.completion_tokens);
      REQUIRE(t.logprobs.size() == s.logprobs.size());
      for (size_t k = 0; k < s.logprobs.size(); ++k) {
        CHECK(t.logprobs[k].token_id == s.logprobs[k].token_id);
        CHECK(t.logprobs[k].logprob == Approx(s.logprobs[k].logprob).margin(1e-5));
      }
    }
  }
}

void check_accepted(const EngineStats& stats) {
  CHECK(stats.num_spec_drafts > 0);
  CHECK(stats.num_spec_accepted_tokens > 0);
  CHECK(stats.num_spec_accepted_tokens <= stats.num_spec_draft_tokens);
  CHECK(stats.kv.used_slots == 0);
  CHECK(stats.num_running == 0);
}

}  // namespace

TEST_CASE("with ngram speculation the golden prompts give the float64 golden greedy ids under every allocator, "
          "alone and in a mixed batch with chunked prefill",
          "[engine][speculative][golden]") {
  const auto golden = load_golden();
  for (const char* allocator : {"kv.contiguous", "kv.paged", "kv.vm"}) {
    INFO(allocator);
    EngineConfig cfg = speculative(stories_config());
    cfg.plugins.kv_allocator = allocator;
    cfg.kv_cache.capacity_tokens = 4096;
    cfg.kv_cache.block_size = 8;
    cfg.scheduler.max_num_batched_tokens = 48;  // prompts of up to 120 tokens prefill in chunks
    Engine engine(cfg);
    for (size_t i = 0; i < golden.size(); ++i) {
      INFO("golden case " << i << " alone");
      const auto alone = run_all(engine, {golden_request(golden[i], "alone")});
      CHECK(alone.at("alone").sample().token_ids == golden[i].greedy_ids);
      CHECK(alone.at("alone").sample().finish_reason == FinishReason::length);
    }
    check_golden(golden, run_all(engine, mixed(golden, 12, 31)));
    check_accepted(engine.stats());
  }
}

TEST_CASE("with ngram speculation a KV budget that forces preemption still gives the golden greedy ids",
          "[engine][speculative][golden][preemption]") {
  const auto golden = load_golden();
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    EngineConfig cfg = speculative(stories_config());
    cfg.kv_cache.capacity_tokens = 256;
    cfg.kv_cache.enable_prefix_caching = false;
    cfg.scheduler.preemption = mode;
    cfg.scheduler.max_num_batched_tokens = 64;
    Engine engine(cfg);
    check_golden(golden, run_all(engine, mixed(golden, 8, 7)));
    const EngineStats stats = engine.stats();
    CHECK(stats.num_preemptions > 0);
    check_accepted(stats);
  }
}

TEST_CASE("stop strings, max_tokens, EOS and logprobs end and report speculative requests as plain decoding does",
          "[engine][speculative]") {
  const auto golden = load_golden();
  std::vector<Request> requests;
  for (size_t i = 0; i < golden.size(); ++i) {
    for (int variant = 0; variant < 4; ++variant) {
      Request r = golden_request(golden[i], "g" + std::to_string(i) + "-" + std::to_string(variant));
      r.sampling.logprobs = variant % 2 ? 2 : -1;
      if (variant == 1) r.sampling.max_tokens = 3 + static_cast<int32_t>(i);  // ends inside a verified run
      if (variant == 2) r.sampling.stop = {"the", "."};
      if (variant == 3) {
        r.sampling.ignore_eos = false;
        r.sampling.max_tokens = 200;
      }
      requests.push_back(std::move(r));
    }
  }
  auto outputs = [&](const EngineConfig& cfg) {
    Engine engine(cfg);
    auto results = run_all(engine, requests);
    return std::make_pair(results, engine.stats());
  };
  // Every CPU linear plugin that serves stories260K's shapes: dense, W8A8,
  // int4 groups, the lookup-table codebook and uint8 with zero points. Each
  // quantized plugin's own greedy text is the reference, so verification rows
  // (a many-row product) must give a decode row's choices exactly.
  for (const char* linear : {"linear.dense", "linear.int8", "linear.int4", "linear.lut4", "linear.uint8_zp"}) {
    INFO(linear);
    EngineConfig cfg = stories_config();
    cfg.plugins.linear = linear;
    const auto [plain, plain_stats] = outputs(cfg);
    const auto [spec, spec_stats] = outputs(speculative(cfg, 6));
    check_same(plain, spec);
    CHECK(plain_stats.num_spec_drafts == 0);
    check_accepted(spec_stats);
    CHECK(spec_stats.num_steps < plain_stats.num_steps);  // verified runs save steps
    // One step in flight at a time (no plan made ahead) gives the same.
    EngineConfig serial = speculative(cfg, 3);
    serial.scheduler.overlap = false;
    const auto [spec_serial, serial_stats] = outputs(serial);
    check_same(plain, spec_serial);
    check_accepted(serial_stats);
  }
}

TEST_CASE("with the int8 linear plugin, a mixed batch decodes the same greedy ids with speculation on and off",
          "[engine][speculative]") {
  const auto golden = load_golden();
  EngineConfig cfg = stories_config();
  cfg.plugins.linear = "linear.int8";
  cfg.scheduler.max_num_batched_tokens = 48;
  std::map<std::string, RequestResult> plain, spec;
  {
    Engine engine(cfg);
    plain = run_all(engine, mixed(golden, 12, 5));
  }
  {
    Engine engine(speculative(cfg));
    spec = run_all(engine, mixed(golden, 12, 5));
    check_accepted(engine.stats());
  }
  for (size_t i = 0; i < golden.size(); ++i) {
    const std::string id = "golden-" + std::to_string(i);
    INFO(id);
    CHECK(spec.at(id).sample().token_ids == plain.at(id).sample().token_ids);
  }
}

TEST_CASE("sampled requests speculate too, and a seed gives the same output alone and among other requests",
          "[engine][speculative][sampling]") {
  // Their distribution is the target's (the rejection rule, test_core
  // [speculation][sampler]); here: the draws are the sample's own.
  const auto golden = load_golden();
  std::vector<Request> sampled;
  for (size_t i = 0; i < golden.size(); ++i) {
    Request r = golden_request(golden[i], "s" + std::to_string(i));
    r.sampling.temperature = 0.7f;
    r.sampling.top_p = 0.9f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 100 + i;
    r.sampling.logprobs = 1;
    sampled.push_back(std::move(r));
  }
  Engine engine(speculative(stories_config()));
  std::map<std::string, RequestResult> alone;
  for (const Request& r : sampled) alone.insert(*run_all(engine, {r}).begin());
  const EngineStats after_alone = engine.stats();
  CHECK(after_alone.num_spec_drafts > 0);
  CHECK(after_alone.num_spec_accepted_tokens > 0);
  std::mt19937 rng(9);
  std::vector<Request> crowd = sampled;
  for (int i = 0; i < 12; ++i) crowd.push_back(filler_request(rng, "other-" + std::to_string(i)));
  std::shuffle(crowd.begin(), crowd.end(), rng);
  const auto together = run_all(engine, crowd);
  for (const Request& r : sampled) {
    INFO(r.id);
    CHECK(together.at(r.id).sample().token_ids == alone.at(r.id).sample().token_ids);
    CHECK(together.at(r.id).sample().finish_reason == FinishReason::length);
  }
  CHECK(engine.stats().kv.used_slots == 0);
}
