#include "apps/bench/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

namespace llmk::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Shared with the event callbacks, which may outlive a timed-out run.
struct RunState {
  Clock::time_point start;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<RequestRecord> records;
  size_t num_live = 0;
  size_t num_done = 0;

  double now() const { return std::chrono::duration<double>(Clock::now() - start).count(); }

  void on_event(size_t i, const RequestEvent& ev) {
    const double t = now();
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
      changed.notify_all();
    }
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

RunResult run_workload(Target& target, const std::vector<BenchRequest>& workload, const RunOptions& options) {
  auto state = std::make_shared<RunState>();
  state->records.resize(workload.size());
  for (size_t i = 0; i < workload.size(); ++i) {
    state->records[i].id = workload[i].request.id;
    state->records[i].num_prompt_tokens = workload[i].num_prompt_tokens;
  }
  RunResult result;
  const std::optional<EngineStats> before = target.stats();
  result.have_stats = before.has_value();

  std::atomic<bool> stop_monitor{false};
  const bool progress = options.progress && isatty(STDERR_FILENO);
  state->start = Clock::now();
  // Samples the server's counters and redraws the progress bar.
  std::thread monitor([&] {
    double next_draw = 0;
    while (!stop_monitor.load()) {
      const double t = state->now();
      if (result.have_stats) {
        if (auto st = target.stats()) {
          KvSample s;
          s.time_s = state->now();
          s.used_fraction = safe_fraction(st->kv.used_slots, st->kv.total_slots);
          s.reserved_fraction = safe_fraction(st->kv.reserved_slots, st->kv.total_slots);
          s.num_running = st->num_running;
          s.num_waiting = st->num_waiting;
          result.kv_samples.push_back(s);
        }
      }
      if (progress && t >= next_draw) {
        size_t done;
        {
          std::lock_guard<std::mutex> lock(state->mutex);
          done = state->num_done;
        }
        draw_progress(done, workload.size(), t, false);
        next_draw = t + 0.1;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(
          result.have_stats ? options.stats_interval_s : std::min(0.1, options.stats_interval_s)));
    }
  });

  const auto deadline = state->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
  bool timed_out = false;
  for (size_t i = 0; i < workload.size() && !timed_out; ++i) {
    std::this_thread::sleep_until(state->start + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(workload[i].arrival_s)));
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      if (options.max_concurrency > 0) {
        timed_out = !state->changed.wait_until(lock, deadline, [&] {
          return state->num_live < static_cast<size_t>(options.max_concurrency);
        });
        if (timed_out) break;
      }
      ++state->num_live;
      state->records[i].submit_s = state->now();
    }
    target.submit(workload[i].request, [state, i](const RequestEvent& ev) { state->on_event(i, ev); });
  }
  {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->changed.wait_until(lock, deadline, [&] { return state->num_done == workload.size(); });
  }
  stop_monitor = true;
  monitor.join();

  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (progress) draw_progress(state->num_done, workload.size(), state->now(), true);
    result.records = state->records;
  }
  for (RequestRecord& r : result.records) {
    if (r.done_s == 0) {
      r.finish_reason = FinishReason::error;
      r.error = r.submit_s > 0 ? "timed out" : "not submitted (timed out)";
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
