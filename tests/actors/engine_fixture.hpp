// Shared pieces of the Engine tests on the CPU: the golden vectors as
// requests, random traffic beside them, the stories260K config
// (stories_config.hpp) and the event collector (engine_events.hpp).
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "engine_events.hpp"
#include "stories_config.hpp"

namespace llmk::test {

struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> input_ids;   // BOS included
  std::vector<float> last_logits;   // [vocab] after the prompt
  std::vector<int32_t> greedy_ids;
  std::string greedy_text;
};

inline std::vector<GoldenCase> load_golden() {
  std::ifstream in(LLMK_SHARED_DIR "/golden/stories260K.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : doc["cases"]) {
    cases.push_back({c["prompt"].get<std::string>(), c["input_ids"].get<std::vector<int32_t>>(),
                     c["last_logits"].get<std::vector<float>>(), c["greedy_ids"].get<std::vector<int32_t>>(),
                     c["greedy_text"].get<std::string>()});
  }
  return cases;
}

// A golden case as a greedy request over its exact input ids.
inline Request golden_request(const GoldenCase& g, const std::string& id) {
  Request r;
  r.id = id;
  r.prompt_token_ids = g.input_ids;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = static_cast<int32_t>(g.greedy_ids.size());
  r.sampling.ignore_eos = true;
  return r;
}

// Random traffic beside the golden requests: random prompts (token ids),
// lengths, and temperatures 0 or 0.8 with a random seed.
inline Request filler_request(std::mt19937& rng, const std::string& id) {
  std::uniform_int_distribution<int32_t> token(3, 511), prompt_len(1, 120), max_tokens(1, 64);
  Request r;
  r.id = id;
  r.prompt_token_ids.push_back(1);
  for (int32_t i = prompt_len(rng); i > 0; --i) r.prompt_token_ids.push_back(token(rng));
  r.sampling.max_tokens = max_tokens(rng);
  r.sampling.temperature = rng() % 2 ? 0.0f : 0.8f;
  r.sampling.seed = rng();
  return r;
}

// The golden requests (ids golden-i) and `num_others` fillers (other-i),
// shuffled.
inline std::vector<Request> golden_and_fillers(const std::vector<GoldenCase>& golden, int num_others,
                                               std::mt19937& rng) {
  std::vector<Request> requests;
  for (size_t i = 0; i < golden.size(); ++i) requests.push_back(golden_request(golden[i], "golden-" + std::to_string(i)));
  for (int i = 0; i < num_others; ++i) requests.push_back(filler_request(rng, "other-" + std::to_string(i)));
  std::shuffle(requests.begin(), requests.end(), rng);
  return requests;
}

}  // namespace llmk::test
