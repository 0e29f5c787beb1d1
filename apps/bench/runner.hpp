// Runs a workload against a Target: submits each request at its arrival
// time (holding it while max_concurrency requests are live), records when
// every event arrives, and samples the server's counters while it runs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "apps/bench/metrics.hpp"
#include "apps/bench/target.hpp"
#include "apps/bench/workload.hpp"

namespace llmk::bench {

// The run's time source. The steady clock sleeps and is woken early by
// events from the target's threads; a test's virtual clock jumps from one
// timer to the next on the runner's thread, so every figure the runner
// derives can be checked exactly, whatever the machine's load.
class RunClock {
 public:
  virtual ~RunClock() = default;
  virtual double now_s() = 0;  // seconds since an arbitrary origin
  // Returns once now_s() >= t_s, or earlier after notify(); the caller
  // re-checks what it waits for. A notify() with no wait under way makes the
  // next wait return at once, so no wake-up is lost.
  virtual void wait_until_s(double t_s) = 0;
  virtual void notify() = 0;  // any thread
};

std::unique_ptr<RunClock> make_steady_run_clock();

struct RunOptions {
  RunClock* clock = nullptr;        // nullptr: a steady clock made for the run
  int32_t max_concurrency = 0;      // 0: unlimited
  double stats_interval_s = 0.05;   // how often the server's counters are sampled
  bool progress = false;            // a progress bar on stderr
  double timeout_s = 600;           // the whole run; requests still live then count as errors
};

struct KvSample {
  double time_s = 0;                // run clock
  double used_fraction = 0;         // used_slots / total_slots
  double reserved_fraction = 0;     // reserved_slots / total_slots
  uint64_t num_running = 0;
  uint64_t num_waiting = 0;
};

struct RunResult {
  std::vector<RequestRecord> records;  // in workload order
  Summary summary;
  std::vector<KvSample> kv_samples;
  bool have_stats = false;
  double kv_peak_used_fraction = 0;
  double kv_peak_reserved_fraction = 0;
  uint64_t peak_running = 0;
  uint64_t num_preemptions = 0;        // during the run
  uint64_t num_prefill_tokens = 0;     // computed during the run
  uint64_t num_relocations = 0;        // during the run
  uint64_t num_steps = 0;              // during the run
  double mean_batch_seqs = 0;          // over the run's steps
  // Speculative decoding during the run: decodes that verified drafts,
  // drafted and accepted tokens.
  uint64_t num_spec_drafts = 0;
  uint64_t num_spec_draft_tokens = 0;
  uint64_t num_spec_accepted_tokens = 0;
  // Tokens a verifying decode emits on average: 1 + accepted / drafts.
  double mean_acceptance_length() const {
    return num_spec_drafts ? 1.0 + static_cast<double>(num_spec_accepted_tokens) / num_spec_drafts : 0.0;
  }
};

RunResult run_workload(Target& target, const std::vector<BenchRequest>& workload, const RunOptions& options);

// Runs `warmup` (results dropped) and waits for it; requests get new ids.
void run_warmup(Target& target, std::vector<BenchRequest> warmup, int32_t max_concurrency);

}  // namespace llmk::bench
