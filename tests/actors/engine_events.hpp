// The Engine tests' collector of request events: each request's samples
// (ids, text, logprobs, ending), checked against the event contract as they
// arrive (nothing after request_done, one final event per sample), and
// run_one / run_all, which submit and wait. Independent of the model, so that
// any test program driving an Engine can use it.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "actors/engine.hpp"

namespace llmk::test {

struct SampleResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  std::string error;
  ErrorCode error_code = ErrorCode::internal;
  std::string error_field;
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
      s.error_field = ev.error_field;
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
