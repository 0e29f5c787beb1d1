// Shared-memory tiling and atomics through kernels written in ordinary CUDA,
// against float64 and integer references.
#include <algorithm>
#include <cmath>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

TEST_CASE("A shared-memory tiled matmul matches float64 on odd sizes under every seed") {
  struct shape {
    int m, n, k;
  };
  for (const shape s : {shape{1, 1, 1}, shape{17, 15, 33}, shape{40, 3, 70}, shape{5, 64, 16}}) {
    const auto a = random_floats(static_cast<std::size_t>(s.m) * s.k, 11), b = random_floats(static_cast<std::size_t>(s.k) * s.n, 12);
    for (auto seed : seeds) {
      reset_simulator(seed);
      INFO("m " << s.m << " n " << s.n << " k " << s.k << " seed " << seed);
      device_buffer<float> da(a), db(b), dc(static_cast<std::size_t>(s.m) * s.n);
      matmul_tiled(da.get(), db.get(), dc.get(), s.m, s.n, s.k, nullptr);
      CUDA_REQUIRE(cudaGetLastError());
      REQUIRE_NO_SIMULATED_RACES();
      const auto c = dc.download();
      for (int i = 0; i < s.m; ++i)
        for (int j = 0; j < s.n; ++j) {
          double want = 0.0, scale = 0.0;
          for (int l = 0; l < s.k; ++l) {
            want += double{a[i * s.k + l]} * b[l * s.n + j];
            scale += std::abs(double{a[i * s.k + l]} * b[l * s.n + j]);
          }
          // float accumulation over k terms: k * eps * sum|a*b|.
          REQUIRE(std::abs(c[i * s.n + j] - want) <= s.k * 1.2e-7 * scale + 1e-7);
        }
    }
  }
}

TEST_CASE("A histogram with shared and global atomicAdd counts every value") {
  for (int n : {1, 1000, 5003})
    for (int num_bins : {1, 7, 256}) {
      const auto values = random_ints(n, n + num_bins, 0, num_bins - 1);
      std::vector<unsigned> want(num_bins, 0);
      for (int v : values) ++want[v];
      for (auto seed : seeds) {
        reset_simulator(seed);
        INFO("n " << n << " bins " << num_bins << " seed " << seed);
        device_buffer<int> dv(values);
        device_buffer<unsigned> dcounts(num_bins);
        CUDA_REQUIRE(cudaMemset(dcounts.get(), 0, num_bins * sizeof(unsigned)));
        histogram(dv.get(), dcounts.get(), n, num_bins, nullptr);
        CUDA_REQUIRE(cudaGetLastError());
        REQUIRE(dcounts.download() == want);
        REQUIRE_NO_SIMULATED_RACES();
      }
    }
}

TEST_CASE("atomicMax, float atomicAdd, atomicCAS and atomicExch agree with a sequential reference") {
  const int n = 1001, num_slots = 13;
  const auto values = random_ints(n, 3, -1000, 1000);
  const auto x = random_floats(n, 4);
  double want_sum = 0.0, abs_sum = 0.0;
  for (float v : x) {
    want_sum += v;
    abs_sum += std::abs(v);
  }
  for (auto seed : seeds) {
    reset_simulator(seed);
    device_buffer<int> dv(values), dmax(std::vector<int>{-1000000}), dclaims(std::vector<int>(num_slots, -1));
    device_buffer<float> dx(x), dsum(std::vector<float>{0.0f});
    atomic_misc(dv.get(), dx.get(), n, dmax.get(), dsum.get(), dclaims.get(), num_slots, nullptr);
    CUDA_REQUIRE(cudaGetLastError());
    REQUIRE(dmax.download()[0] == *std::max_element(values.begin(), values.end()));
    REQUIRE(std::abs(dsum.download()[0] - want_sum) <= n * 1.2e-7 * abs_sum);
    // Each slot is claimed exactly once, by one of the threads that map to it.
    const auto claims = dclaims.download();
    for (int s = 0; s < num_slots; ++s) {
      INFO("slot " << s);
      REQUIRE(claims[s] >= 0);
      REQUIRE(claims[s] % num_slots == s);
    }
  }
}
