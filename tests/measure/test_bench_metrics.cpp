// The bench runner and metrics against a stub with a known schedule on a
// virtual clock: the figures must be exactly what the schedule implies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "apps/bench/runner.hpp"
#include "stub_target.hpp"

using namespace llmk;
using namespace llmk::bench;
using llmk::test::StubTarget;
using llmk::test::VirtualRunClock;

namespace {

std::vector<BenchRequest> stub_workload(int32_t n, int32_t output_len) {
  WorkloadSpec spec;
  spec.num_requests = n;
  spec.input_len = {8, 8};
  spec.output_len = {output_len, output_len};
  spec.vocab_size = 100;
  spec.id_prefix = "req-";
  return make_workload(spec);
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

// Times are sums of a few decimal fractions: equal up to rounding.
Approx exactly(double seconds) { return Approx(seconds).margin(1e-12).epsilon(0); }

}  // namespace

TEST_CASE("percentiles interpolate linearly between closest ranks", "[percentile]") {
  CHECK(percentile({}, 50) == 0);
  CHECK(percentile({7}, 99) == 7);
  CHECK(percentile({1, 2, 3, 4}, 50) == Approx(2.5));
  CHECK(percentile({4, 1, 3, 2}, 0) == 1);
  CHECK(percentile({4, 1, 3, 2}, 100) == 4);
  // numpy.percentile([10, 20, 30, 40, 50], 90) == 46; (.., 99) == 49.6
  CHECK(percentile({50, 10, 40, 20, 30}, 90) == Approx(46));
  CHECK(percentile({50, 10, 40, 20, 30}, 99) == Approx(49.6));
  std::vector<double> ramp(101);
  std::iota(ramp.begin(), ramp.end(), 0.0);
  CHECK(percentile(ramp, 37) == Approx(37));
}

TEST_CASE("distribution gives mean, p50, p90, p99 and max", "[percentile]") {
  const Distribution d = distribution({3, 1, 2, 10});
  CHECK(d.count == 4);
  CHECK(d.mean == Approx(4));
  CHECK(d.p50 == Approx(2.5));
  CHECK(d.p90 == Approx(7.9));   // rank 2.7: 3 + 0.7 * 7
  CHECK(d.p99 == Approx(9.79));  // rank 2.97
  CHECK(d.max == 10);
}

TEST_CASE("summarize computes TTFT, TPOT, ITL and e2e from token arrival times", "[metrics]") {
  auto record = [](std::string id, double submit_s, std::vector<double> times, FinishReason reason) {
    RequestRecord r;
    r.id = std::move(id);
    r.submit_s = submit_s;
    r.token_times_s = std::move(times);
    r.done_s = r.token_times_s.back();
    r.num_prompt_tokens = 10;
    r.num_output_tokens = static_cast<int32_t>(r.token_times_s.size());
    r.finish_reason = reason;
    return r;
  };
  const RequestRecord a = record("a", 1.0, {1.1, 1.2, 1.2, 1.5}, FinishReason::length);  // two tokens in one event
  const RequestRecord b = record("b", 1.5, {2.0}, FinishReason::stop);
  const RequestRecord failed = record("c", 1.0, {1.1, 1.2, 1.2, 1.5}, FinishReason::error);
  const Summary s = summarize({a, b, failed});
  CHECK(s.num_ok == 2);
  CHECK(s.num_errors == 1);
  CHECK(s.duration_s == Approx(1.0));  // 1.0 .. 2.0
  CHECK(s.num_output_tokens == 5);
  CHECK(s.output_tokens_per_s == Approx(5));
  CHECK(s.total_tokens_per_s == Approx(25));
  CHECK(s.ttft_s.mean == Approx((0.1 + 0.5) / 2));
  REQUIRE(s.tpot_s.count == 1);  // b has one token: no TPOT
  CHECK(s.tpot_s.mean == Approx(0.4 / 3));
  CHECK(s.itl_s.count == 3);
  CHECK(s.itl_s.max == Approx(0.3));
  CHECK(s.itl_s.p50 == Approx(0.1));
  CHECK(s.e2e_s.mean == Approx((0.5 + 0.5) / 2));
}

TEST_CASE("bench figures match the stub's injected TTFT and per-token gaps", "[runner]") {
  VirtualRunClock clock;
  StubTarget stub(clock);
  const int32_t n = 20, out = 5;
  RunOptions o;
  o.clock = &clock;
  o.stats_interval_s = 0.005;
  const RunResult r = run_workload(stub, stub_workload(n, out), o);
  REQUIRE(r.summary.num_ok == static_cast<size_t>(n));
  CHECK(r.summary.num_output_tokens == static_cast<uint64_t>(n * out));
  CHECK(r.summary.num_prompt_tokens == static_cast<uint64_t>(n * 8));
  CHECK(r.summary.itl_s.count == static_cast<size_t>(n * (out - 1)));
  CHECK(r.summary.requests_per_s == Approx(n / r.summary.duration_s));

  // TTFT 50..69 ms by index: mean 59.5, p50 59.5, p90 67.1, p99 68.81.
  CHECK(r.summary.ttft_s.mean == exactly(0.0595));
  CHECK(r.summary.ttft_s.p50 == exactly(0.0595));
  CHECK(r.summary.ttft_s.p90 == exactly(0.0671));
  CHECK(r.summary.ttft_s.p99 == exactly(0.06881));
  // Gaps 10, 11, 12 ms for i % 3 = 0, 1, 2 (7, 7 and 6 requests): TPOT
  // mean (70 + 77 + 72) / 20 = 10.95 ms; pooled ITL: 28 gaps of 10, 28 of
  // 11, 24 of 12 ms, so the median is 11 ms.
  CHECK(r.summary.tpot_s.mean == exactly(0.01095));
  CHECK(r.summary.itl_s.mean == exactly(0.01095));
  CHECK(r.summary.itl_s.p50 == exactly(0.011));
  CHECK(r.summary.itl_s.max == exactly(0.012));
  // e2e = ttft + 4 gaps.
  std::vector<double> e2e;
  for (int i = 0; i < n; ++i) e2e.push_back(stub.schedule.ttft_s(i) + (out - 1) * stub.schedule.gap_s(i));
  CHECK(r.summary.e2e_s.mean == exactly(mean(e2e)));
  CHECK(r.summary.e2e_s.p50 == exactly(percentile(e2e, 50)));
  CHECK(r.summary.e2e_s.p99 == exactly(percentile(e2e, 99)));
  // All submitted at once: the run lasts as long as the slowest request.
  CHECK(r.summary.duration_s == exactly(*std::max_element(e2e.begin(), e2e.end())));

  // Per-request records carry the exact streamed ids.
  for (int i = 0; i < n; ++i) {
    INFO("request " << i);
    REQUIRE(r.records[i].output_ids.size() == static_cast<size_t>(out));
    CHECK(r.records[i].output_ids[2] == i * 7 + 2);
  }
  // Server counters: 20 live at the peak (200 of 1000 slots), deltas only,
  // sampled every 5 ms of the run.
  REQUIRE(r.have_stats);
  CHECK(r.num_preemptions == static_cast<uint64_t>(n));
  REQUIRE(r.kv_samples.size() >= 2);
  CHECK(r.kv_samples[1].time_s - r.kv_samples[0].time_s == exactly(0.005));
  CHECK(r.kv_peak_used_fraction == exactly(0.2));
  CHECK(r.peak_running == 20);
}

TEST_CASE("max_concurrency holds requests until one finishes", "[runner]") {
  VirtualRunClock clock;
  StubTarget stub(clock);
  RunOptions o;
  o.clock = &clock;
  o.max_concurrency = 4;
  o.stats_interval_s = 0.005;
  const RunResult r = run_workload(stub, stub_workload(12, 3), o);
  REQUIRE(r.summary.num_ok == 12);
  CHECK(stub.max_live() == 4);
  CHECK(r.kv_peak_used_fraction == exactly(0.04));
  // TTFT is measured from the actual submit, so queueing does not inflate it.
  CHECK(r.summary.ttft_s.max == exactly(0.061));
  // Request 0 is the first to finish, at 50 + 2 x 10 ms: request 4 is
  // submitted then, not before.
  CHECK(r.records[4].submit_s == exactly(0.070));
}

TEST_CASE("requests are submitted at their arrival times", "[runner]") {
  VirtualRunClock clock;
  StubTarget stub(clock);
  WorkloadSpec spec;
  spec.num_requests = 10;
  spec.input_len = {4, 4};
  spec.output_len = {1, 1};
  spec.vocab_size = 100;
  spec.id_prefix = "req-";
  spec.arrival = Arrival::fixed;
  spec.request_rate = 100;  // every 10 ms
  RunOptions o;
  o.clock = &clock;
  const RunResult r = run_workload(stub, make_workload(spec), o);
  REQUIRE(r.summary.num_ok == 10);
  for (int i = 0; i < 10; ++i) {
    INFO("request " << i);
    CHECK(r.records[i].submit_s == exactly(0.010 * i));
  }
}

TEST_CASE("a run that passes its timeout counts the requests still live as errors", "[runner]") {
  VirtualRunClock clock;
  StubTarget stub(clock);
  RunOptions o;
  o.clock = &clock;
  o.timeout_s = 0.075;  // request 0 ends at 70 ms, request 1 at 73 ms, request 2 at 76 ms
  const RunResult r = run_workload(stub, stub_workload(3, 3), o);
  CHECK(r.summary.num_ok == 2);
  CHECK(r.summary.num_errors == 1);
  CHECK(r.records[2].finish_reason == FinishReason::error);
  CHECK(r.records[2].error == "timed out");
}

TEST_CASE("the steady run clock's wait returns at its deadline or at once after a notify", "[runner]") {
  // Order only, no durations: a notify() before the wait is never lost.
  auto clock = make_steady_run_clock();
  const double t0 = clock->now_s();
  clock->notify();
  clock->wait_until_s(t0 + 3600);  // returns at once, or the test times out
  clock->wait_until_s(t0);         // a deadline already past
  CHECK(clock->now_s() >= t0);
}
