// cuBLASLt's type combinations and FAST compute types: the combinations the
// library refuses are refused (A and B of different types, F16 inputs with a
// BF16 output, a FAST compute type over non-F32 matrices), and FAST_TF32 /
// FAST_16F / FAST_16BF round A and B to their format before the products,
// checked against float64 over inputs rounded by this file's own rounding.
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

// x rounded to nearest even with `mantissa_bits` explicit bits (normal range).
double round_mantissa(double x, int mantissa_bits) {
  if (x == 0.0) return 0.0;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, f in [0.5, 1)
  const double ulp = std::ldexp(1.0, e - 1 - mantissa_bits);
  return std::nearbyint(x / ulp) * ulp;
}

struct lt_fixture {
  cublasLtHandle_t handle = nullptr;
  lt_fixture() { REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS); }
  ~lt_fixture() { cublasLtDestroy(handle); }

  // D (m x n, type d_type) = A (m x k, a_type) * B (k x n, b_type), column-major, no transposes.
  cublasStatus_t matmul(cublasComputeType_t compute, cudaDataType a_type, const void* a, cudaDataType b_type,
                        const void* b, cudaDataType d_type, void* d, int m, int n, int k) {
    cublasLtMatmulDesc_t desc = nullptr;
    REQUIRE(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&la, a_type, m, k, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&lb, b_type, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&ld, d_type, m, n, m) == CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t status =
        cublasLtMatmul(handle, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, nullptr, nullptr, 0, nullptr);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return status;
  }
};

}  // namespace

TEST_CASE("cublasLtMatmul refuses the type combinations cuBLASLt does not offer", "[cublaslt]") {
  reset_simulator(1);
  lt_fixture lt;
  device_buffer<std::uint16_t> h16(64), b16(64);
  device_buffer<float> f32(64), out32(64);
  device_buffer<std::uint16_t> out16(64);
  // A F16 and B BF16.
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F, CUDA_R_16F, h16.get(), CUDA_R_16BF, b16.get(), CUDA_R_32F, out32.get(), 8, 8, 8) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
#if !LLMK_CUDA_NATIVE
  CHECK(cudasim::last_error_detail().find("A is F16 and B BF16: A and B must share a type") != std::string::npos);
#endif
  // F16 inputs with a BF16 output.
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F, CUDA_R_16F, h16.get(), CUDA_R_16F, h16.get(), CUDA_R_16BF, out16.get(), 8, 8, 8) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
#if !LLMK_CUDA_NATIVE
  CHECK(cudasim::last_error_detail().find("A/B F16 with C/D BF16 is not a combination cuBLASLt offers") !=
        std::string::npos);
#endif
  // A FAST compute type over F16 matrices.
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_16F, h16.get(), CUDA_R_16F, h16.get(), CUDA_R_32F, out32.get(),
                  8, 8, 8) == CUBLAS_STATUS_NOT_SUPPORTED);
#if !LLMK_CUDA_NATIVE
  CHECK(cudasim::last_error_detail().find("under a FAST compute type") != std::string::npos);
#endif
  // Offered: F16 in, F32 out; BF16 in, BF16 out; F32 under FAST_16BF.
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F, CUDA_R_16F, h16.get(), CUDA_R_16F, h16.get(), CUDA_R_32F, out32.get(), 8, 8, 8) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F, CUDA_R_16BF, b16.get(), CUDA_R_16BF, b16.get(), CUDA_R_16BF, out16.get(), 8, 8,
                  8) == CUBLAS_STATUS_SUCCESS);
  CHECK(lt.matmul(CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F, f32.get(), CUDA_R_32F, f32.get(), CUDA_R_32F, out32.get(),
                  8, 8, 8) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

TEST_CASE("FAST compute types round F32 inputs to TF32, F16 or BF16 before the products", "[cublaslt]") {
  const int m = 3, n = 2, k = 64;
  // Inputs 1 + j/128 + 2^-12: exact in float; TF32, F16 and BF16 all drop
  // the 2^-12 (below half their ulp at 1), so every product loses about the
  // same, and the rounded sum sits far from the full-precision one.
  const auto inputs = [](std::size_t count, std::uint64_t seed) {
    std::vector<float> v;
    for (int j : random_ints(count, seed, 0, 127)) v.push_back(1.0f + static_cast<float>(j) / 128.0f + 0x1p-12f);
    return v;
  };
  const auto a = inputs(static_cast<std::size_t>(m) * k, 31), b = inputs(static_cast<std::size_t>(k) * n, 32);
  const auto product = [&](int mantissa_bits) {
    std::vector<double> d(static_cast<std::size_t>(m) * n, 0.0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i)
        for (int l = 0; l < k; ++l)
          d[i + j * m] += round_mantissa(a[i + l * m], mantissa_bits) * round_mantissa(b[l + j * k], mantissa_bits);
    return d;
  };
  const std::vector<double> exact = product(23);
  struct fast_case {
    cublasComputeType_t compute;
    int mantissa_bits;
    const char* name;
  };
  for (const fast_case c : {fast_case{CUBLAS_COMPUTE_32F_FAST_TF32, 10, "FAST_TF32"},
                            fast_case{CUBLAS_COMPUTE_32F_FAST_16F, 10, "FAST_16F"},
                            fast_case{CUBLAS_COMPUTE_32F_FAST_16BF, 7, "FAST_16BF"}}) {
    INFO(c.name);
    reset_simulator(1);
    lt_fixture lt;
    device_buffer<float> da(a), db(b), dd(static_cast<std::size_t>(m) * n);
    REQUIRE(lt.matmul(c.compute, CUDA_R_32F, da.get(), CUDA_R_32F, db.get(), CUDA_R_32F, dd.get(), m, n, k) ==
            CUBLAS_STATUS_SUCCESS);
    const auto got = dd.download();
    const auto want = product(c.mantissa_bits);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i << " got " << got[i] << " want " << want[i] << " exact " << exact[i]);
      // Float accumulation of k products in [1, 4): within k ulps of the rounded-input sum,
      const double tolerance = k * 1.2e-7 * std::abs(want[i]);
      REQUIRE(std::abs(got[i] - want[i]) <= tolerance);
      // which the rounding moved well away from the full-precision sum.
      REQUIRE(std::abs(want[i] - exact[i]) > 10.0 * tolerance);
    }
  }
}
