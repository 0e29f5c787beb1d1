// A bench::Target with a known schedule on a virtual clock: request i (its
// id's numeric suffix) sends its first token ttft(i) after submit and token
// k at ttft(i) + k * gap(i). Events are timers of the VirtualRunClock, run on
// the runner's own thread when the runner waits past their time, so every
// figure the runner derives is exact. Its stats report 10 KV slots of 1000
// per live request and one preemption per finished request.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "apps/bench/runner.hpp"
#include "apps/bench/target.hpp"

namespace llmk::test {

// Time stands still until the runner waits; a wait runs the earliest timer
// due by its deadline (moving time to that timer) or, with none due, jumps
// to the deadline. Single-threaded: the target must only use at().
class VirtualRunClock final : public bench::RunClock {
 public:
  double now_s() override { return now_s_; }
  void wait_until_s(double t_s) override {
    if (notified_) {
      notified_ = false;
      return;
    }
    if (!timers_.empty() && timers_.begin()->first <= t_s) {
      auto node = timers_.extract(timers_.begin());
      now_s_ = std::max(now_s_, node.key());
      node.mapped()();
      return;
    }
    now_s_ = std::max(now_s_, t_s);
  }
  void notify() override { notified_ = true; }

  // Runs `fn` at time t_s; timers of equal time run in the order set.
  void at(double t_s, std::function<void()> fn) { timers_.emplace(t_s, std::move(fn)); }

 private:
  double now_s_ = 1000;  // any origin: the runner measures from its start
  bool notified_ = false;
  std::multimap<double, std::function<void()>> timers_;
};

struct StubSchedule {
  double ttft_s(size_t i) const { return 0.050 + 0.001 * static_cast<double>(i); }
  double gap_s(size_t i) const { return 0.010 + 0.001 * static_cast<double>(i % 3); }
};

class StubTarget : public bench::Target {
 public:
  explicit StubTarget(VirtualRunClock& clock) : clock_(clock) {}

  void submit(Request request, EventCallback on_event) override {
    const double t0 = clock_.now_s();
    const size_t i = std::stoul(request.id.substr(request.id.find_last_of('-') + 1));
    max_live_ = std::max(max_live_, ++live_);
    const int32_t n = request.sampling.max_tokens;
    const auto num_prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
    for (int32_t k = 0; k < n; ++k) {
      clock_.at(t0 + schedule.ttft_s(i) + k * schedule.gap_s(i), [this, i, k, n, num_prompt_tokens, id = request.id, on_event] {
        RequestEvent ev;
        ev.request_id = id;
        ev.token_ids = {static_cast<int32_t>(i * 7 + k)};
        if (k == n - 1) {
          ev.finished = true;
          ev.finish_reason = FinishReason::length;
          ev.usage.prompt_tokens = num_prompt_tokens;
          ev.usage.completion_tokens = n;
          ev.request_done = true;
          --live_;
          ++finished_;
        }
        on_event(ev);
      });
    }
  }

  std::optional<EngineStats> stats() override {
    EngineStats s;
    s.kv.total_slots = 1000;
    s.kv.used_slots = 10 * live_;
    s.kv.reserved_slots = 10 * live_;
    s.num_running = live_;
    s.num_preemptions = 100 + finished_;  // nonzero before the run: deltas must be taken
    return s;
  }
  std::string name() const override { return "stub"; }

  size_t max_live() const { return max_live_; }

  StubSchedule schedule;

 private:
  VirtualRunClock& clock_;
  size_t live_ = 0, max_live_ = 0, finished_ = 0;
};

}  // namespace llmk::test
