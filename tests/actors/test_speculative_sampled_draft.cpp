// Sampled drafting (speculative.draft_sampling sampled) through the Engine on
// stories260K: a sampled request's drafts are draws from the draft model's
// own distribution q, verified by min(1, p/q); greedy requests keep greedy
// drafts. Seeds reproduce alone and among others, greedy ids stay golden,
// and with the target as its own draft (q = p) every draft is accepted,
// which the point-mass rule of greedy drafts cannot do at temperature 0.7.
#include <catch2/catch.hpp>

#include <random>

#include "engine_fixture.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

EngineConfig with_sampled_draft(EngineConfig cfg, const std::string& draft_linear, const std::string& mode) {
  cfg.speculative.method = "draft";
  cfg.speculative.draft_model = cfg.model.path;
  cfg.speculative.draft_linear = draft_linear;
  cfg.speculative.num_tokens = 4;
  cfg.speculative.draft_sampling = mode;
  return cfg;
}

std::vector<Request> sampled_requests(const std::vector<GoldenCase>& golden) {
  std::vector<Request> out;
  for (size_t i = 0; i < golden.size(); ++i) {
    Request r = golden_request(golden[i], "s" + std::to_string(i));
    r.sampling.temperature = 0.7f;
    r.sampling.top_p = 0.95f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 200 + i;
    out.push_back(std::move(r));
  }
  return out;
}

double acceptance(const EngineStats& s) {
  return s.num_spec_draft_tokens == 0 ? -1.0
                                      : static_cast<double>(s.num_spec_accepted_tokens) /
                                            static_cast<double>(s.num_spec_draft_tokens);
}

}  // namespace

TEST_CASE("sampled drafts: a seed gives the same output alone and among others, and greedy ids stay golden",
          "[engine][speculative][draft][sampling]") {
  const auto golden = load_golden();
  const std::vector<Request> sampled = sampled_requests(golden);
  Engine engine(with_sampled_draft(stories_config(), "linear.int8", "sampled"));
  std::map<std::string, RequestResult> alone;
  for (const Request& r : sampled) alone.insert(*run_all(engine, {r}).begin());
  const EngineStats first = engine.stats();
  CHECK(first.num_spec_drafts > 0);
  CHECK(acceptance(first) > 0.3);
  std::mt19937 rng(17);
  std::vector<Request> crowd = sampled;
  for (size_t i = 0; i < golden.size(); ++i) crowd.push_back(golden_request(golden[i], "golden-" + std::to_string(i)));
  for (int i = 0; i < 8; ++i) crowd.push_back(filler_request(rng, "other-" + std::to_string(i)));
  std::shuffle(crowd.begin(), crowd.end(), rng);
  const auto together = run_all(engine, crowd);
  for (const Request& r : sampled) {
    INFO(r.id);
    CHECK(together.at(r.id).violations.empty());
    CHECK(together.at(r.id).sample().token_ids == alone.at(r.id).sample().token_ids);
  }
  for (size_t i = 0; i < golden.size(); ++i) {
    INFO("golden case " << i);
    CHECK(together.at("golden-" + std::to_string(i)).sample().token_ids == golden[i].greedy_ids);
  }
  CHECK(engine.stats().kv.used_slots == 0);
}

TEST_CASE("sampled drafts from the target itself (q = p) are all accepted; greedy drafts are not",
          "[engine][speculative][draft][sampling]") {
  const auto golden = load_golden();
  const std::vector<Request> sampled = sampled_requests(golden);
  // q equals p up to the rounding of a chunk against single rows, so
  // min(1, p/q) rejects next to never; with greedy drafts a sampled row
  // accepts the argmax with its probability only, well below 1 at T = 0.7.
  Engine with_q(with_sampled_draft(stories_config(), "", "sampled"));
  run_all(with_q, sampled);
  const double a_sampled = acceptance(with_q.stats());
  Engine point(with_sampled_draft(stories_config(), "", "greedy"));
  run_all(point, sampled);
  const double a_greedy = acceptance(point.stats());
  INFO("acceptance: sampled drafts " << a_sampled << ", greedy drafts " << a_greedy);
  CHECK(a_sampled > 0.99);
  CHECK(a_greedy > 0.0);
  CHECK(a_greedy < 0.95);
}

TEST_CASE("speculative.draft_sampling is validated, naming the key", "[engine][speculative][draft][config]") {
  EngineConfig bad = with_sampled_draft(stories_config(), "", "nucleus");
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("speculative.draft_sampling") && Catch::Contains("nucleus"));
  // Both samplers verify drafts drawn from q: the section's own check
  // accepts sampled drafts on cuda (validate() refuses an unbuilt device first).
  EngineConfig cuda = with_sampled_draft(stories_config(), "", "sampled");
  cuda.executor.device = "cuda";
  CHECK_NOTHROW(validate_speculative(cuda));
}
