#include "apps/bench/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>

namespace llmk::bench {
namespace {

class SteadyRunClock final : public RunClock {
 public:
  double now_s() override { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  void wait_until_s(double t_s) override {
    const auto until = origin_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t_s));
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_until(lock, until, [&] { return notified_; });
    notified_ = false;
  }
  void notify() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      notified_ = true;
    }
    changed_.notify_all();
  }

 private:
  using Clock = std::chrono::steady_clock;
  const Clock::time_point origin_ = Clock::now();
  std::mutex mutex_;
  std::condition_variable changed_;
  bool notified_ = false;
};

// Shared with the event callbacks, which may outlive a timed-out run (the
// clock then too, when the run made it).
struct RunState {
  RunClock* clock = nullptr;
  std::shared_ptr<RunClock> owned_clock;
  double start_s = 0;  // clock time the run started
  std::mutex mutex;
  std::vector<RequestRecord> records;
  size_t num_live = 0;
  size_t num_done = 0;

  double now() const { return clock->now_s() - start_s; }

  void on_event(size_t i, const RequestEvent& ev) {
    const double t = now();
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      RequestRecord& r = records[i];
      if (r.done_s > 0) return;  // nothing counts after request_done
      if (ev.index == 0) {
        for (int32_t id : ev.token_ids) {
          r.token_times_s.push_back(t);
          r.output_ids.push_back(id);
        }
        if (ev.finished) {
          r.finish_reason = ev.finish_reason;
          r.error = ev.error;
          r.num_output_tokens = ev.usage.completion_tokens > 0 ? ev.usage.completion_tokens
                                                               : static_cast<int32_t>(r.token_times_s.size());
          if (ev.usage.prompt_tokens > 0) r.num_prompt_tokens = ev.usage.prompt_tokens;
        }
      }
      if (ev.request_done) {
        if (r.finish_reason == FinishReason::none) {
          r.finish_reason = ev.finish_reason == FinishReason::none ? FinishReason::error : ev.finish_reason;
          if (r.error.empty()) r.error = ev.error.empty() ? "request done without a finished sample" : ev.error;
        }
        r.done_s = std::max(t, 1e-9);
        --num_live;
        ++num_done;
        done = true;
      }
    }
    if (done) clock->notify();
  }
};

void draw_progress(size_t done, size_t total, double elapsed_s, bool final) {
  constexpr int width = 40;
  const int filled = total > 0 ? static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width) : width;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r[%s] %zu/%zu requests  %.1f s%s", bar.c_str(), done, total, elapsed_s, final ? "\n" : "");
  std::fflush(stderr);
}

double safe_fraction(uint64_t part, uint64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

std::unique_ptr<RunClock> make_steady_run_clock() { return std::make_unique<SteadyRunClock>(); }

RunResult run_workload(Target& target, const std::vector<BenchRequest>& workload, const RunOptions& options) {
  auto state = std::make_shared<RunState>();
  if (options.clock != nullptr) {
    state->clock = options.clock;
  } else {
    state->owned_clock = make_steady_run_clock();
    state->clock = state->owned_clock.get();
  }
  state->records.resize(workload.size());
  for (size_t i = 0; i < workload.size(); ++i) {
    state->records[i].id = workload[i].request.id;
    state->records[i].num_prompt_tokens = workload[i].num_prompt_tokens;
  }
  std::vector<bool> submitted(workload.size(), false);
  RunResult result;
  const std::optional<EngineStats> before = target.stats();
  result.have_stats = before.has_value();
  const bool progress = options.progress && isatty(STDERR_FILENO);
  // Counters are sampled, and the progress bar redrawn, on this thread
  // between waits: one thread drives the run, on either clock.
  // Deadlines are compared in the clock's own time, never in run time: a
  // wait until clock time T must satisfy the check that follows it exactly.
  const double sample_interval_s = result.have_stats ? options.stats_interval_s : std::min(0.1, options.stats_interval_s);
  double next_sample_at = -std::numeric_limits<double>::infinity();
  auto sample_if_due = [&] {
    const double now_at = state->clock->now_s();
    if (now_at < next_sample_at) return;
    next_sample_at = now_at + sample_interval_s;
    const double t = now_at - state->start_s;
    if (result.have_stats) {
      if (auto st = target.stats()) {
        KvSample s;
        s.time_s = t;
        s.used_fraction = safe_fraction(st->kv.used_slots, st->kv.total_slots);
        s.reserved_fraction = safe_fraction(st->kv.reserved_slots, st->kv.total_slots);
        s.num_running = st->num_running;
        s.num_waiting = st->num_waiting;
        result.kv_samples.push_back(s);
      }
    }
    if (progress) {
      std::lock_guard<std::mutex> lock(state->mutex);
      draw_progress(state->num_done, workload.size(), t, false);
    }
  };
  // Waits until `ready()` holds (checked under the state's lock) or the run
  // time reaches `until_s`; returns whether `ready()` held.
  auto wait_for = [&](double until_s, auto ready) {
    const double until_at = state->start_s + until_s;
    for (;;) {
      sample_if_due();
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (ready()) return true;
      }
      if (state->clock->now_s() >= until_at) return false;
      state->clock->wait_until_s(std::min(until_at, next_sample_at));
    }
  };

  state->start_s = state->clock->now_s();
  bool timed_out = false;
  for (size_t i = 0; i < workload.size() && !timed_out; ++i) {
    const double arrival_s = workload[i].arrival_s;
    wait_for(std::min(arrival_s, options.timeout_s), [] { return false; });
    timed_out = arrival_s > options.timeout_s;
    if (!timed_out && options.max_concurrency > 0) {
      timed_out = !wait_for(options.timeout_s, [&] {
        return state->num_live < static_cast<size_t>(options.max_concurrency);
      });
    }
    if (timed_out) break;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      ++state->num_live;
      state->records[i].submit_s = state->now();
    }
    submitted[i] = true;
    target.submit(workload[i].request, [state, i](const RequestEvent& ev) { state->on_event(i, ev); });
  }
  wait_for(options.timeout_s, [&] { return state->num_done == workload.size(); });

  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (progress) draw_progress(state->num_done, workload.size(), state->now(), true);
    result.records = state->records;
  }
  for (size_t i = 0; i < result.records.size(); ++i) {
    RequestRecord& r = result.records[i];
    if (r.done_s == 0) {
      r.finish_reason = FinishReason::error;
      r.error = submitted[i] ? "timed out" : "not submitted (timed out)";
    }
  }
  result.summary = summarize(result.records);

  if (result.have_stats) {
    if (auto after = target.stats()) {
      result.num_preemptions = after->num_preemptions - before->num_preemptions;
      result.num_prefill_tokens = after->num_prefill_tokens - before->num_prefill_tokens;
      result.num_relocations = after->kv.num_relocations - before->kv.num_relocations;
      result.num_steps = after->num_steps - before->num_steps;
      result.peak_running = after->peak_running;
      result.num_spec_drafts = after->num_spec_drafts - before->num_spec_drafts;
      result.num_spec_draft_tokens = after->num_spec_draft_tokens - before->num_spec_draft_tokens;
      result.num_spec_accepted_tokens = after->num_spec_accepted_tokens - before->num_spec_accepted_tokens;
      if (result.num_steps > 0) {
        result.mean_batch_seqs = (after->mean_batch_seqs * static_cast<double>(after->num_steps) -
                                  before->mean_batch_seqs * static_cast<double>(before->num_steps)) /
                                 static_cast<double>(result.num_steps);
      }
    }
    for (const KvSample& s : result.kv_samples) {
      result.kv_peak_used_fraction = std::max(result.kv_peak_used_fraction, s.used_fraction);
      result.kv_peak_reserved_fraction = std::max(result.kv_peak_reserved_fraction, s.reserved_fraction);
      result.peak_running = std::max(result.peak_running, s.num_running);
    }
  }
  return result;
}

void run_warmup(Target& target, std::vector<BenchRequest> warmup, int32_t max_concurrency) {
  if (warmup.empty()) return;
  for (size_t i = 0; i < warmup.size(); ++i) {
    warmup[i].request.id = "warmup-" + std::to_string(i);
    warmup[i].arrival_s = 0;
  }
  RunOptions o;
  o.max_concurrency = max_concurrency;
  o.stats_interval_s = 0.5;
  run_workload(target, warmup, o);
}

}  // namespace llmk::bench
