// The bench runner and metrics against a stub with a known schedule: the
// figures must match what the schedule implies, within the scheduling
// jitter of a sleeping thread.
#include <catch2/catch.hpp>

#include <numeric>

#include "apps/bench/runner.hpp"
#include "stub_target.hpp"

using namespace llmk;
using namespace llmk::bench;
using llmk::test::StubTarget;

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

// Seconds: thread start plus sleep overshoot on a loaded 2-core machine.
constexpr double kJitter = 0.005;

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
  StubTarget stub;
  const int32_t n = 20, out = 5;
  const RunResult r = run_workload(stub, stub_workload(n, out), RunOptions{});
  REQUIRE(r.summary.num_ok == static_cast<size_t>(n));
  CHECK(r.summary.num_output_tokens == static_cast<uint64_t>(n * out));
  CHECK(r.summary.num_prompt_tokens == static_cast<uint64_t>(n * 8));

  // TTFT 50..69 ms by index: mean 59.5, p50 59.5, p90 67.1, p99 68.81.
  CHECK(r.summary.ttft_s.mean == Approx(0.0595).margin(kJitter));
  CHECK(r.summary.ttft_s.p50 == Approx(0.0595).margin(kJitter));
  CHECK(r.summary.ttft_s.p90 == Approx(0.0671).margin(kJitter));
  CHECK(r.summary.ttft_s.p99 == Approx(0.06881).margin(kJitter));
  // Gaps 10, 11, 12 ms for i % 3 = 0, 1, 2 (7, 7 and 6 requests): TPOT mean
  // 10.95 ms; pooled ITL: 28 gaps of 10, 28 of 11, 24 of 12 ms.
  CHECK(r.summary.tpot_s.mean == Approx(0.01095).margin(0.001));
  CHECK(r.summary.itl_s.count == static_cast<size_t>(n * (out - 1)));
  CHECK(r.summary.itl_s.mean == Approx(0.01095).margin(0.001));
  CHECK(r.summary.itl_s.p50 == Approx(0.011).margin(0.002));
  // e2e = ttft + 4 gaps.
  std::vector<double> e2e;
  for (int i = 0; i < n; ++i) e2e.push_back(stub.schedule.ttft_s(i) + (out - 1) * stub.schedule.gap_s(i));
  CHECK(r.summary.e2e_s.mean == Approx(mean(e2e)).margin(kJitter));
  CHECK(r.summary.e2e_s.p50 == Approx(percentile(e2e, 50)).margin(kJitter));
  CHECK(r.summary.e2e_s.p99 == Approx(percentile(e2e, 99)).margin(kJitter));
  // All submitted at once: the run lasts as long as the slowest request.
  CHECK(r.summary.duration_s == Approx(*std::max_element(e2e.begin(), e2e.end())).margin(kJitter));
  CHECK(r.summary.requests_per_s == Approx(n / r.summary.duration_s));

  // Per-request records carry the exact streamed ids.
  for (int i = 0; i < n; ++i) {
    INFO("request " << i);
    REQUIRE(r.records[i].output_ids.size() == static_cast<size_t>(out));
    CHECK(r.records[i].output_ids[2] == i * 7 + 2);
  }
  // Server counters: 20 live at the peak (200 of 1000 slots), deltas only.
  REQUIRE(r.have_stats);
  CHECK(r.kv_peak_used_fraction == Approx(0.2));
  CHECK(r.num_preemptions == static_cast<uint64_t>(n));
  CHECK(!r.kv_samples.empty());
}

TEST_CASE("max_concurrency holds requests until one finishes", "[runner]") {
  StubTarget stub;
  RunOptions o;
  o.max_concurrency = 4;
  o.stats_interval_s = 0.005;
  const RunResult r = run_workload(stub, stub_workload(12, 3), o);
  REQUIRE(r.summary.num_ok == 12);
  CHECK(stub.max_live() == 4);
  CHECK(r.kv_peak_used_fraction == Approx(0.04));
  // TTFT is measured from the actual submit, so queueing does not inflate it.
  CHECK(r.summary.ttft_s.max == Approx(0.061).margin(kJitter));
  // Request 4 cannot start before one of 0..3 finishes (at >= 50 + 2 x 10 ms).
  CHECK(r.records[4].submit_s >= 0.070 - 0.0005);
}

TEST_CASE("requests are submitted at their arrival times", "[runner]") {
  StubTarget stub;
  WorkloadSpec spec;
  spec.num_requests = 10;
  spec.input_len = {4, 4};
  spec.output_len = {1, 1};
  spec.vocab_size = 100;
  spec.id_prefix = "req-";
  spec.arrival = Arrival::fixed;
  spec.request_rate = 100;  // every 10 ms
  const RunResult r = run_workload(stub, make_workload(spec), RunOptions{});
  REQUIRE(r.summary.num_ok == 10);
  for (int i = 0; i < 10; ++i) {
    INFO("request " << i);
    CHECK(r.records[i].submit_s >= 0.010 * i);  // never early
    CHECK(r.records[i].submit_s == Approx(0.010 * i).margin(kJitter));
  }
}
