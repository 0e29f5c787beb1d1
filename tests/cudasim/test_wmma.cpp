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

namespace {

// Runs wmma_square_tile on a 16-row tile of __half with row stride lda,
// starting `offset` elements into its buffer; returns the synchronisation's
// status and d ([16, ldd] floats).
std::pair<cudaError_t, std::vector<float>> square_tile(const std::vector<__half>& a, unsigned lda,
                                                       std::size_t offset, unsigned ldd) {
  device_buffer<__half> da(a);
  device_buffer<float> dd(16 * ldd);
  wmma_square_tile(da.get() + offset, lda, dd.get(), ldd, nullptr);
  const cudaError_t status = cudaDeviceSynchronize();
  return {status, status == cudaSuccess ? dd.download() : std::vector<float>{}};
}

}  // namespace

TEST_CASE("WMMA loads and stores straight from global memory with legal pointers and ldm give the product") {
  reset_simulator(1);
  const unsigned lda = 24;  // 48 bytes: a multiple of 16
  const auto values = random_floats(16 * lda, 23);
  std::vector<__half> a(values.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = __float2half(values[i]);
  const auto [status, d] = square_tile(a, lda, 0, 20);
  CUDA_REQUIRE(status);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = 0.0;
      for (int l = 0; l < 16; ++l) want += double{__half2float(a[i * lda + l])} * __half2float(a[l * lda + j]);
      REQUIRE(std::abs(d[i * 20 + j] - want) <= 16 * 1.2e-7 * 16 + 1e-6);
    }
}

#if !LLMK_CUDA_NATIVE
TEST_CASE("WMMA loads and stores refuse a pointer not 32-byte aligned and an ldm not a multiple of 16 bytes") {
  // The refusal aborts the kernel's warps mid-kernel, and Boost.Context
  // unwinds their fibers by a forced exception: under AddressSanitizer this
  // passes only because the simulation announces its fiber switches
  // (cudasim/scheduler.cpp); without that, ASan reports the unwinding as a
  // stack-use-after-scope.
  reset_simulator(1);
  std::vector<__half> a(16 * 32 + 8, __float2half(0.5f));
  SECTION("ldm of 12 halves (24 bytes)") {
    REQUIRE(square_tile(a, 12, 0, 16).first == cudaErrorLaunchFailure);
    INFO(cudasim::last_error_detail());
    REQUIRE(cudasim::last_error_detail().rfind("kernel 'wmma_square_tile_kernel': wmma::load_matrix_sync: pointer 0x", 0) == 0);
    REQUIRE(cudasim::last_error_detail().find("(aligned) and ldm 12 (24 bytes, not a multiple of 16)") != std::string::npos);
  }
  SECTION("a tile starting 16 bytes into its allocation") {
    REQUIRE(square_tile(a, 16, 8, 16).first == cudaErrorLaunchFailure);
    INFO(cudasim::last_error_detail());
    REQUIRE(cudasim::last_error_detail().find("(not 32-byte aligned) and ldm 16 (32 bytes)") != std::string::npos);
  }
  SECTION("a store with ldm of 18 floats (72 bytes)") {
    REQUIRE(square_tile(a, 16, 0, 18).first == cudaErrorLaunchFailure);
    INFO(cudasim::last_error_detail());
    REQUIRE(cudasim::last_error_detail().find("wmma::store_matrix_sync: pointer") != std::string::npos);
    REQUIRE(cudasim::last_error_detail().find("ldm 18 (72 bytes, not a multiple of 16)") != std::string::npos);
  }
  (void)cudaGetLastError();
}
#endif
