// Shared pieces of the Engine tests: a stories260K config, the golden
// vectors, and a thread-safe collector of request events that checks the
// event contract as it goes (nothing after request_done, one final event per
// sample).
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actors/engine.hpp"

namespace llmk::test {

inline EngineConfig stories_config() {
  EngineConfig cfg;
  cfg.model.path = LLMK_SHARED_DIR "/models/stories260K";
  cfg.executor.num_threads = 1;
  cfg.kv_cache.capacity_tokens = 16384;
  cfg.kv_cache.block_size = 16;
  cfg.plugins.kv_allocator = "kv.paged";
  cfg.scheduler.max_num_seqs = 64;
  cfg.scheduler.max_num_batched_tokens = 512;
  return cfg;
}

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

struct SampleResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  std::string error;
  ErrorCode error_code = ErrorCode::internal;
  Usage usage;
  Timings timings;
};

struct RequestResult {
  std::map<int32_t, SampleResult> samples;  // by sample index
  int32_t num_done_events = 0;
  std::vector<std::string> violations;      // broken event contract
  const SampleResult& sample(int32_t i = 0) const { return samples.at(i); }
};

class Collector {
 public:
  Engine::EventCallback callback() {
    return [this](const RequestEvent& ev) { take(ev); };
  }

  void take(const RequestEvent& ev) {
    std::lock_guard<std::mutex> lock(mutex_);
    RequestResult& r = results_[ev.request_id];
    if (r.num_done_events > 0) r.violations.push_back("event after request_done");
    SampleResult& s = r.samples[ev.index];
    if (s.finished) r.violations.push_back("event after the sample's final event");
    s.token_ids.insert(s.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    s.text += ev.text_delta;
    s.logprobs.insert(s.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished) {
      s.finished = true;
      s.finish_reason = ev.finish_reason;
      s.error = ev.error;
      s.error_code = ev.error_code;
      s.usage = ev.usage;
      s.timings = ev.timings;
    }
    if (ev.request_done) {
      ++r.num_done_events;
      ++num_done_;
      done_.notify_all();
    }
  }

  // Waits until `n` requests are done; false on timeout.
  bool wait_done(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_.wait_for(lock, timeout, [&] { return num_done_ >= n; });
  }

  std::map<std::string, RequestResult> results() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_;
  }
  size_t num_done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return num_done_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::map<std::string, RequestResult> results_;
  size_t num_done_ = 0;
};

// Submits one request, waits for its end and checks the event contract.
inline RequestResult run_one(Engine& engine, Request r) {
  Collector collector;
  const std::string id = r.id;
  engine.submit(std::move(r), collector.callback());
  REQUIRE(collector.wait_done(1, std::chrono::seconds(20)));
  RequestResult result = collector.results().at(id);
  CHECK(result.violations.empty());
  CHECK(result.num_done_events == 1);
  return result;
}

// Submits every request and waits for all of them to end; results by id.
inline std::map<std::string, RequestResult> run_all(Engine& engine, const std::vector<Request>& requests,
                                                    std::chrono::seconds timeout = std::chrono::seconds(180)) {
  Collector collector;
  for (const Request& r : requests) engine.submit(r, collector.callback());
  REQUIRE(collector.wait_done(requests.size(), timeout));
  return collector.results();
}

}  // namespace llmk::test
