// Structured requests that speculate (actors/sampler_actor.cpp: a mask per
// verification row, the matcher walked through the drafts and rolled back)
// through the Engine on stories260K: with prompt lookup and with the target
// as its own draft model, every structured request gives the ids, text and
// ending it gives without speculation, alone and beside unconstrained
// requests, whose golden greedy ids stay; drafts are proposed, some accepted
// and, where the grammar refuses what the unconstrained model would write,
// some rejected.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include "actors/engine_fixture.hpp"
#include "core/grammar.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

// Lowercase words and spaces: the golden texts' capitals, punctuation and
// newlines are refused, and so are prompt lookup's drafts that copy them.
constexpr const char* kWords = "[a-z ]+";
// A JSON object with one short string: nothing stories260K writes unmasked.
constexpr const char* kObject =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}}, "required": ["name"]})";

std::shared_ptr<const StructuredOutput> grammar(GrammarKind kind, const char* text) {
  return std::make_shared<const StructuredOutput>(StructuredOutput{kind, text, "test", nullptr});
}

// Each golden prompt twice: under the words regex and under the JSON schema.
std::vector<Request> structured_requests(const std::vector<GoldenCase>& golden) {
  std::vector<Request> out;
  for (size_t i = 0; i < golden.size(); ++i) {
    for (const bool json : {false, true}) {
      Request r = golden_request(golden[i], (json ? "json-" : "words-") + std::to_string(i));
      r.sampling.ignore_eos = false;
      r.sampling.max_tokens = json ? 48 : static_cast<int32_t>(golden[i].greedy_ids.size());
      r.sampling.structured = json ? grammar(GrammarKind::json_schema, kObject) : grammar(GrammarKind::regex, kWords);
      out.push_back(std::move(r));
    }
  }
  return out;
}

EngineConfig with_ngram(EngineConfig cfg) {
  cfg.speculative.method = "ngram";
  cfg.speculative.num_tokens = 4;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  return cfg;
}

EngineConfig with_self_draft(EngineConfig cfg) {
  cfg.speculative.method = "draft";
  cfg.speculative.draft_model = cfg.model.path;
  cfg.speculative.draft_linear = "linear.dense";
  cfg.speculative.num_tokens = 4;
  return cfg;
}

void check_same(const std::map<std::string, RequestResult>& plain, const std::map<std::string, RequestResult>& spec,
                const std::vector<Request>& requests) {
  for (const Request& r : requests) {
    INFO(r.id);
    const SampleResult& a = plain.at(r.id).sample();
    const SampleResult& b = spec.at(r.id).sample();
    CHECK(spec.at(r.id).violations.empty());
    CHECK(b.finish_reason != FinishReason::error);
    CHECK(b.token_ids == a.token_ids);
    CHECK(b.text == a.text);
    CHECK(b.finish_reason == a.finish_reason);
  }
}

}  // namespace

TEST_CASE("structured requests speculate, with a mask per verification row, and give what they give without",
          "[engine][speculative][structured]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  const auto golden = load_golden();
  const std::vector<Request> requests = structured_requests(golden);
  Engine plain_engine(stories_config());
  const auto plain = run_all(plain_engine, requests);
  // The reference itself keeps its grammars: words, and a whole JSON object.
  for (const Request& r : requests) {
    INFO(r.id << ": '" << plain.at(r.id).sample().text << "'");
    const std::string& text = plain.at(r.id).sample().text;
    if (r.id.rfind("words-", 0) == 0) {
      CHECK(std::regex_match(text, std::regex(kWords)));
    } else if (plain.at(r.id).sample().finish_reason == FinishReason::stop) {
      const auto doc = nlohmann::json::parse(text, nullptr, false);
      CHECK((doc.is_object() && doc.contains("name") && doc["name"].is_string()));
    }
  }
  for (const bool self_draft : {false, true}) {
    INFO((self_draft ? "the target as its own draft model" : "prompt lookup"));
    Engine engine(self_draft ? with_self_draft(stories_config()) : with_ngram(stories_config()));
    std::map<std::string, RequestResult> alone;
    for (const Request& r : requests) alone.insert(*run_all(engine, {r}).begin());
    check_same(plain, alone, requests);
    const EngineStats stats = engine.stats();
    CHECK(stats.num_spec_drafts > 0);
    CHECK(stats.num_spec_accepted_tokens > 0);
    if (self_draft) {
      // The unconstrained model's own greedy drafts: the masks refuse some.
      CHECK(stats.num_spec_accepted_tokens < stats.num_spec_draft_tokens);
    }
    // Beside unconstrained golden requests and random traffic, in one batch.
    std::mt19937 rng(11);
    std::vector<Request> crowd = requests;
    for (size_t i = 0; i < golden.size(); ++i) crowd.push_back(golden_request(golden[i], "golden-" + std::to_string(i)));
    for (int i = 0; i < 6; ++i) crowd.push_back(filler_request(rng, "other-" + std::to_string(i)));
    std::shuffle(crowd.begin(), crowd.end(), rng);
    const auto together = run_all(engine, crowd);
    check_same(plain, together, requests);
    for (size_t i = 0; i < golden.size(); ++i) {
      INFO("golden case " << i);
      CHECK(together.at("golden-" + std::to_string(i)).sample().token_ids == golden[i].greedy_ids);
    }
    CHECK(engine.stats().kv.used_slots == 0);
  }
}
