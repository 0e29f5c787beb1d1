// Structured outputs through the whole engine on the simulated CUDA device:
// the five actors, the tokenizer compiling each grammar, the sampler actor's
// matchers filling masks while the next step runs, the CUDA executor and the
// CUDA sampler applying the masks on the device (core/cuda, linear.cublas and
// attention.cuda built against the simulation). stories260K's golden prompts
// under a lowercase-words regex and a JSON schema give the ids, text and
// ending the CPU engine gives them, alone, beside unconstrained golden
// requests (whose greedy ids stay the golden ones) and while speculating
// (prompt lookup, and the target as its own draft model on the device);
// sampled structured requests keep their grammar.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("structured outputs on the simulated CUDA executor need the simulated plugins", "[cuda_executor][structured]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/engine.hpp"
#include "actors/engine_events.hpp"
#include "actors/stories_config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/device_registry.hpp"
#include "core/grammar.hpp"
#include "support/golden.hpp"
#include "support/skip.hpp"

namespace {

using namespace llmk;

constexpr const char* kLowercaseWords = "[a-z ]+";
constexpr const char* kNameObject =
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 24}}, "required": ["name"]})";

EngineConfig structured_engine_config(bool cuda) {
  EngineConfig cfg = test::stories_config();
  cfg.model.path = test::stories_dir();  // LLMK_SHARED_DIR may move the models (support/golden.hpp)
  if (cuda) {
    cfg.executor.device = "cuda";
    cfg.plugins.linear = "linear.cublas";
    cfg.plugins.attention = "attention.cuda";
    cfg.plugins.search_path = {LLMK_CUDASIM_PLUGIN_DIR};
  }
  return cfg;
}

// The first three golden prompts, each under the words regex and the schema.
std::vector<Request> structured_golden_requests(int32_t words_tokens, int32_t json_tokens) {
  std::vector<Request> out;
  const auto& golden = test::golden_cases();
  for (size_t i = 0; i < 3; ++i) {
    for (const bool json : {false, true}) {
      Request r;
      r.id = (json ? "json-" : "words-") + std::to_string(i);
      r.prompt_token_ids = golden[i].input_ids;
      r.sampling.temperature = 0;
      r.sampling.max_tokens = json ? json_tokens : words_tokens;
      r.sampling.structured = std::make_shared<const StructuredOutput>(
          StructuredOutput{json ? GrammarKind::json_schema : GrammarKind::regex, json ? kNameObject : kLowercaseWords,
                           "test", nullptr});
      out.push_back(std::move(r));
    }
  }
  return out;
}

// The text keeps its grammar: words, or (when it ended by itself) the object.
void check_follows_grammar(const std::string& id, const test::SampleResult& s) {
  INFO(id << ": '" << s.text << "'");
  CHECK(s.finish_reason != FinishReason::error);
  if (id.rfind("words-", 0) == 0) {
    CHECK(std::regex_match(s.text, std::regex(kLowercaseWords)));
  } else if (s.finish_reason == FinishReason::stop) {
    const auto doc = nlohmann::json::parse(s.text, nullptr, false);
    CHECK((doc.is_object() && doc.size() == 1 && doc.contains("name") && doc["name"].is_string()));
  } else {
    CHECK(s.text.rfind("{", 0) == 0);
  }
}

void check_same_as_cpu(const std::map<std::string, test::RequestResult>& cpu,
                       const std::map<std::string, test::RequestResult>& cuda, const std::vector<Request>& requests) {
  for (const Request& r : requests) {
    INFO(r.id);
    const test::SampleResult& want = cpu.at(r.id).sample();
    const test::SampleResult& got = cuda.at(r.id).sample();
    CHECK(cuda.at(r.id).violations.empty());
    CHECK(got.token_ids == want.token_ids);
    CHECK(got.text == want.text);
    CHECK(got.finish_reason == want.finish_reason);
  }
}

}  // namespace

TEST_CASE("structured requests through the engine on the simulated CUDA executor give the CPU engine's ids, "
          "alone, batched and speculating",
          "[cuda_executor][structured][engine]") {
  if (!structured_outputs_available()) LLMK_SKIP(structured_outputs_missing());
  cudasim_test::reset_simulator(1);
  // The device's executor and sampler for Device::cuda: the simulation's in
  // test_cudasim (also where the build has no CUDA backend to register),
  // the real ones in test_cuda_native.
  register_device_backend(Device::cuda, DeviceBackend{&make_cuda_executor, &make_cuda_sampler, nullptr});

  const std::vector<Request> structured = structured_golden_requests(16, 24);
  Engine cpu_engine(structured_engine_config(false));
  const auto cpu = test::run_all(cpu_engine, structured);
  for (const Request& r : structured) check_follows_grammar(r.id, cpu.at(r.id).sample());

  Engine cuda_engine(structured_engine_config(true));
  // One at a time: a batch of one row, masked or not at each step.
  std::map<std::string, test::RequestResult> alone;
  for (const Request& r : structured) alone.insert(*test::run_all(cuda_engine, {r}).begin());
  check_same_as_cpu(cpu, alone, structured);

  // Together, beside unconstrained greedy golden requests and sampled
  // structured ones: masks only on their own rows.
  std::vector<Request> crowd = structured;
  const auto& golden = test::golden_cases();
  for (size_t i = 0; i < 2; ++i) {
    Request r;
    r.id = "golden-" + std::to_string(i);
    r.prompt_token_ids = golden[i].input_ids;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = 16;
    crowd.push_back(std::move(r));
  }
  for (Request r : structured_golden_requests(16, 24)) {
    r.id = "sampled-" + r.id;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 7;
    crowd.push_back(std::move(r));
  }
  const auto together = test::run_all(cuda_engine, crowd);
  check_same_as_cpu(cpu, together, structured);
  for (size_t i = 0; i < 2; ++i) {
    INFO("golden case " << i);
    const std::vector<int32_t>& ids = together.at("golden-" + std::to_string(i)).sample().token_ids;
    CHECK(ids == std::vector<int32_t>(golden[i].greedy_ids.begin(), golden[i].greedy_ids.begin() + 16));
  }
  for (const Request& r : structured) check_follows_grammar(r.id, together.at("sampled-" + r.id).sample());
  CHECK(cuda_engine.stats().kv.used_slots == 0);

  // Speculating: a mask per verification row on the device. Prompt lookup
  // drafts from the prompts, which the grammars mostly refuse; the target as
  // its own draft model (on the device too) drafts its unconstrained greedy
  // tokens, which the masks accept where the grammar allows them.
  for (const bool self_draft : {false, true}) {
    INFO((self_draft ? "the target as its own draft model" : "prompt lookup"));
    EngineConfig spec = structured_engine_config(true);
    spec.speculative.num_tokens = 3;
    if (self_draft) {
      spec.speculative.method = "draft";
      spec.speculative.draft_model = spec.model.path;
      spec.speculative.draft_linear = "linear.cublas";
    } else {
      spec.speculative.method = "ngram";
      spec.speculative.prompt_lookup_min = 1;
      spec.speculative.prompt_lookup_max = 3;
    }
    Engine speculating(spec);
    const auto drafted = test::run_all(speculating, structured);
    check_same_as_cpu(cpu, drafted, structured);
    const EngineStats stats = speculating.stats();
    CHECK(stats.num_spec_drafts > 0);
    if (self_draft) {
      CHECK(stats.num_spec_accepted_tokens > 0);
      CHECK(stats.num_spec_accepted_tokens < stats.num_spec_draft_tokens);
    }
  }
}

#endif
