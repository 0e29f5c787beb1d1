// Fibers, barriers, warp collectives and the race check, through kernels
// written in ordinary CUDA (kernels/*.cu) against float64 / integer references.
#include <cmath>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

struct row_reference {
  std::vector<double> sums, abs_sums;
};

row_reference row_sums(const std::vector<float>& x, int num_rows, int n) {
  row_reference ref{std::vector<double>(num_rows, 0.0), std::vector<double>(num_rows, 0.0)};
  for (int r = 0; r < num_rows; ++r)
    for (int i = 0; i < n; ++i) {
      ref.sums[r] += x[static_cast<std::size_t>(r) * n + i];
      ref.abs_sums[r] += std::abs(x[static_cast<std::size_t>(r) * n + i]);
    }
  return ref;
}

// Float sums in a tree or strided order: error ~ log2(n) * eps * sum|x|;
// 1e-5 * sum|x| covers it with margin (and not a dropped or doubled element).
void require_sums_close(const std::vector<float>& got, const row_reference& want) {
  for (std::size_t r = 0; r < want.sums.size(); ++r) {
    INFO("row " << r << ": " << got[r] << " vs " << want.sums[r]);
    REQUIRE(std::abs(got[r] - want.sums[r]) <= 1e-5 * want.abs_sums[r] + 1e-6);
  }
}

}  // namespace

TEST_CASE("A warp-shuffle block reduction gives the float64 row sums under every seed") {
  const int num_rows = 5;
  for (int n : {1, 31, 33, 1000, 4097})
    for (int num_threads : {32, 96, 256}) {
      const auto x = random_floats(static_cast<std::size_t>(num_rows) * n, n);
      const auto want = row_sums(x, num_rows, n);
      for (auto seed : seeds) {
        reset_simulator(seed);
        INFO("n " << n << " threads " << num_threads << " seed " << seed);
        device_buffer<float> dx(x), dout(num_rows);
        row_sum_shuffle(dx.get(), dout.get(), num_rows, n, num_threads, nullptr);
        CUDA_REQUIRE(cudaGetLastError());
        require_sums_close(dout.download(), want);
        REQUIRE_NO_SIMULATED_RACES();
      }
    }
}

TEST_CASE("A shared-memory tree reduction with its barriers is exact and race-free under every seed") {
  const int num_rows = 3, n = 777;
  const auto x = random_floats(num_rows * n, 5);
  const auto want = row_sums(x, num_rows, n);
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<float> dx(x), dout(num_rows);
    row_sum_tree(dx.get(), dout.get(), num_rows, n, 128, nullptr);
    CUDA_REQUIRE(cudaGetLastError());
    require_sums_close(dout.download(), want);
    REQUIRE_NO_SIMULATED_RACES();
  }
}

#if !LLMK_CUDA_NATIVE
// The simulation's race check itself: simulation only.
TEST_CASE("The race check fails a reduction whose __syncthreads was removed, under every seed") {
  const int num_rows = 2, n = 300;
  const auto x = random_floats(num_rows * n, 6);
  for (auto seed : seeds) {
    reset_simulator(seed);
    INFO("seed " << seed);
    device_buffer<float> dx(x), dout(num_rows);
    row_sum_tree_missing_sync(dx.get(), dout.get(), num_rows, n, 128, nullptr);
    REQUIRE(cudaGetLastError() == cudaErrorLaunchFailure);
    REQUIRE(cudasim::race_count() > 0);
    const auto race = cudasim::first_race();
    REQUIRE(race.has_value());
    CHECK(race->kernel.find("row_sum_tree_kernel<false>") != std::string::npos);
    CHECK(race->region == "dynamic shared");
    CHECK(race->offset < 128 * sizeof(float));
    CHECK(race->first_thread != race->second_thread);
    CHECK(race->text.find("no barrier") != std::string::npos);
    CHECK(cudasim::last_error_detail().find("race") != std::string::npos);
  }
}

TEST_CASE("The race check counts a __syncwarp as ordering lanes' shared-memory accesses, and a shuffle not") {
  for (auto seed : seeds) {
    INFO("seed " << seed);
    reset_simulator(seed);
    device_buffer<float> out(1);
    pair_handoff(out.get(), true, nullptr);
    CUDA_REQUIRE(cudaGetLastError());
    REQUIRE_NO_SIMULATED_RACES();
    CHECK(out.download()[0] == 3.0f);
    pair_handoff(out.get(), false, nullptr);
    REQUIRE(cudaGetLastError() == cudaErrorLaunchFailure);
    const auto race = cudasim::first_race();
    REQUIRE(race.has_value());
    CHECK(race->kernel.find("pair_handoff_kernel") != std::string::npos);
    CHECK(race->kind == "write after read");
    CHECK(race->region == "static shared");
  }
}

TEST_CASE("The race check finds the missing barrier after a tiled matmul's products") {
  const int m = 20, n = 18, k = 40;
  const auto a = random_floats(m * k, 1), b = random_floats(k * n, 2);
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<float> da(a), db(b), dc(m * n);
    matmul_tiled_missing_sync(da.get(), db.get(), dc.get(), m, n, k, nullptr);
    REQUIRE(cudaGetLastError() == cudaErrorLaunchFailure);
    const auto race = cudasim::first_race();
    REQUIRE(race.has_value());
    CHECK(race->region == "static shared");
    // The next tile's stores meet this tile's loads: which comes first depends on the order.
    CHECK((race->kind == "read after write" || race->kind == "write after read"));
  }
}

TEST_CASE("In report mode a racy launch succeeds and the races stay queryable") {
  reset_simulator(3);
  cudasim::set_race_mode(cudasim::race_mode::report);
  device_buffer<float> dx(random_floats(256, 1)), dout(1);
  row_sum_tree_missing_sync(dx.get(), dout.get(), 1, 256, 64, nullptr);
  CUDA_REQUIRE(cudaGetLastError());
  REQUIRE(cudasim::race_count() > 0);
  REQUIRE(!cudasim::races().empty());
  cudasim::clear_races();
  REQUIRE_NO_SIMULATED_RACES();
  cudasim::set_race_mode(cudasim::race_mode::off);
  row_sum_tree_missing_sync(dx.get(), dout.get(), 1, 256, 64, nullptr);
  REQUIRE_NO_SIMULATED_RACES();
  cudasim::set_race_mode(cudasim::race_mode::fail);
}

#else
// On the GPU the race check is compute-sanitizer's: scripts/gpu-check.sh runs
// this hidden case under `--tool racecheck` and requires a reported hazard, the
// native twin of the cases above. Run alone it proves nothing (the sum of a
// racy reduction is whatever the hardware's order gives), so it asserts only
// that the launches were accepted.
TEST_CASE("A reduction whose __syncthreads was removed runs, for compute-sanitizer racecheck to flag",
          "[.][racecheck_canary]") {
  device_buffer<float> dx(random_floats(2 * 300, 6)), dout(2);
  row_sum_tree_missing_sync(dx.get(), dout.get(), 2, 300, 128, nullptr);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
}
#endif  // !LLMK_CUDA_NATIVE

TEST_CASE("Shuffles, votes and thread coordinates match their definitions lane by lane") {
  const int num_threads = 96;
  const auto values = random_ints(num_threads, 9, 0, 100);
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<int> dv(values), dout(num_threads * 8);
    warp_ops(dv.get(), dout.get(), num_threads, nullptr);
    CUDA_REQUIRE(cudaGetLastError());
    const auto out = dout.download();
    for (int t = 0; t < num_threads; ++t) {
      const int lane = t % 32, base = t - lane;
      const int* o = &out[static_cast<std::size_t>(t) * 8];
      unsigned ballot = 0;
      bool any = false, all = true;
      for (int l = 0; l < 32; ++l) {
        ballot |= (values[base + l] % 2 != 0 ? 1u : 0u) << l;
        any = any || values[base + l] > 90;
        all = all && values[base + l] >= 0;
      }
      INFO("thread " << t);
      CHECK(o[0] == values[base + (lane + 3) % 32]);
      CHECK(o[1] == values[base + (lane ^ 5)]);
      CHECK(o[2] == (lane + 4 < 32 ? values[t + 4] : values[t]));
      CHECK(o[3] == (lane % 8 >= 2 ? values[t - 2] : values[t]));
      CHECK(static_cast<unsigned>(o[4]) == ballot);
      CHECK(o[5] == (any ? 1 : 0));
      CHECK(o[6] == (all ? 1 : 0));
      CHECK(o[7] == t);
    }
  }
}

TEST_CASE("A block scan with __shfl_up_sync and shared warp totals gives the prefix sums") {
  for (int n : {1, 32, 45, 1000}) {
    const int num_rows = 3;
    const auto x = random_ints(static_cast<std::size_t>(num_rows) * n, n, -50, 50);
    for (auto seed : seeds) {
      reset_simulator(seed);
      INFO("n " << n << " seed " << seed);
      device_buffer<int> dx(x), dy(x.size());
      inclusive_scan_rows(dx.get(), dy.get(), num_rows, n, nullptr);
      CUDA_REQUIRE(cudaGetLastError());
      const auto y = dy.download();
      for (int r = 0; r < num_rows; ++r) {
        long long sum = 0;
        for (int i = 0; i < n; ++i) {
          sum += x[static_cast<std::size_t>(r) * n + i];
          REQUIRE(y[static_cast<std::size_t>(r) * n + i] == sum);
        }
      }
      REQUIRE_NO_SIMULATED_RACES();
    }
  }
}
