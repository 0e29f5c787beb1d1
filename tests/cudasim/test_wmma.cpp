// The WMMA subset: 16x16x16 tiles of half / bfloat16 inputs with float
// accumulators, against a float64 product of the same (rounded) inputs.
#include <cmath>

#include "test_kernels.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

// a: [m, k] row-major, b: [k, n] column-major, both already rounded to the
// input type and given back as float; returns c: [m, n] row-major.
std::vector<double> reference(const std::vector<float>& a, const std::vector<float>& b, int m, int n, int k) {
  std::vector<double> c(static_cast<std::size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < k; ++l) c[i * n + j] += double{a[i * k + l]} * b[j * k + l];
  return c;
}

template <class T, class Launch>
void check_wmma(Launch launch, T (*to_t)(float), float (*to_float)(T), int m, int n, int k) {
  auto a32 = random_floats(static_cast<std::size_t>(m) * k, 21), b32 = random_floats(static_cast<std::size_t>(k) * n, 22);
  std::vector<T> a(a32.size()), b(b32.size());
  for (std::size_t i = 0; i < a.size(); ++i) a32[i] = to_float(a[i] = to_t(a32[i]));
  for (std::size_t i = 0; i < b.size(); ++i) b32[i] = to_float(b[i] = to_t(b32[i]));
  const auto want = reference(a32, b32, m, n, k);
  for (auto seed : seeds) {
    reset_simulator(seed);
    INFO("m " << m << " n " << n << " k " << k << " seed " << seed);
    device_buffer<T> da(a), db(b);
    device_buffer<float> dc(static_cast<std::size_t>(m) * n);
    launch(da.get(), db.get(), dc.get(), m, n, k, nullptr);
    CUDA_REQUIRE(cudaGetLastError());
    REQUIRE_NO_SIMULATED_RACES();
    const auto c = dc.download();
    // Products of rounded inputs are exact in float; float accumulation over k.
    for (std::size_t i = 0; i < c.size(); ++i) REQUIRE(std::abs(c[i] - want[i]) <= k * 1.2e-7 * k + 1e-6);
  }
}

}  // namespace

TEST_CASE("WMMA half tiles with float accumulators match the float64 product") {
  check_wmma<__half>(wmma_gemm_f16, [](float v) { return __float2half_rn(v); }, [](__half v) { return __half2float(v); },
                     32, 48, 64);
}

TEST_CASE("WMMA bfloat16 tiles with float accumulators match the float64 product") {
  check_wmma<__nv_bfloat16>(
      wmma_gemm_bf16, [](float v) { return __float2bfloat16_rn(v); },
      [](__nv_bfloat16 v) { return __bfloat162float(v); }, 16, 16, 16);
  check_wmma<__nv_bfloat16>(
      wmma_gemm_bf16, [](float v) { return __float2bfloat16_rn(v); },
      [](__nv_bfloat16 v) { return __bfloat162float(v); }, 48, 32, 80);
}
