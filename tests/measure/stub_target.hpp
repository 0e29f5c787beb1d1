// A bench::Target with a known schedule: request i (its id's numeric
// suffix) sends its first token ttft(i) after submit and token k at
// ttft(i) + k * gap(i), each at an absolute time so sleep errors do not
// add up. Its stats report 10 KV slots of 1000 per live request and one
// preemption per finished request.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/target.hpp"

namespace llmk::test {

struct StubSchedule {
  double ttft_s(size_t i) const { return 0.050 + 0.001 * static_cast<double>(i); }
  double gap_s(size_t i) const { return 0.010 + 0.001 * static_cast<double>(i % 3); }
};

class StubTarget : public bench::Target {
 public:
  ~StubTarget() override {
    for (auto& t : threads_) t.join();
  }

  void submit(Request request, EventCallback on_event) override {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const size_t i = std::stoul(request.id.substr(request.id.find_last_of('-') + 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++live_;
      max_live_ = std::max(max_live_, live_);
    }
    threads_.emplace_back([this, t0, i, request = std::move(request), on_event = std::move(on_event)] {
      const int32_t n = request.sampling.max_tokens;
      for (int32_t k = 0; k < n; ++k) {
        const double at = schedule.ttft_s(i) + k * schedule.gap_s(i);
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
        RequestEvent ev;
        ev.request_id = request.id;
        ev.token_ids = {static_cast<int32_t>(i * 7 + k)};
        if (k == n - 1) {
          ev.finished = true;
          ev.finish_reason = FinishReason::length;
          ev.usage.prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
          ev.usage.completion_tokens = n;
          ev.request_done = true;
          std::lock_guard<std::mutex> lock(mutex_);
          --live_;
          ++finished_;
        }
        on_event(ev);
      }
    });
  }

  std::optional<EngineStats> stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineStats s;
    s.kv.total_slots = 1000;
    s.kv.used_slots = 10 * live_;
    s.kv.reserved_slots = 10 * live_;
    s.num_running = live_;
    s.num_preemptions = 100 + finished_;  // nonzero before the run: deltas must be taken
    return s;
  }
  std::string name() const override { return "stub"; }

  size_t max_live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return max_live_;
  }

  StubSchedule schedule;

 private:
  mutable std::mutex mutex_;
  size_t live_ = 0, max_live_ = 0, finished_ = 0;
  std::vector<std::thread> threads_;  // touched by the submitting thread only
};

}  // namespace llmk::test
