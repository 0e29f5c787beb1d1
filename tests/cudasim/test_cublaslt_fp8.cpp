// The simulated cuBLASLt FP8 path: E4M3 operands with per-tensor scale
// pointers against float64 over the decoded operands, the scale read when
// the product runs (graph replay), and the library's FP8 restrictions.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

std::vector<__nv_fp8_e4m3> to_e4m3(const std::vector<float>& x) {
  std::vector<__nv_fp8_e4m3> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __nv_fp8_e4m3(x[i]);
  return out;
}

struct Fp8Matmul {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  Fp8Matmul(int32_t op_a, int32_t op_b) {
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)) ==
            CUBLAS_STATUS_SUCCESS);
  }
  ~Fp8Matmul() {
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void set_scales(const float* a, const float* b) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a, sizeof(a)) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b, sizeof(b)) ==
            CUBLAS_STATUS_SUCCESS);
  }
  // D = A^T B for E4M3 A (k x m) and B (k x n) into an F32 D with leading
  // dimension ldd: the library's answer.
  cublasStatus_t run_tn(const void* a, const void* b, float* d, int m, int n, int k, int ldd) const {
    cublasLtMatrixLayoutOpaque_t la, lb, ld;
    REQUIRE(cublasLtMatrixLayoutInit(&la, CUDA_R_8F_E4M3, k, m, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutInit(&lb, CUDA_R_8F_E4M3, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutInit(&ld, CUDA_R_32F, m, n, ldd) == CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(handle, desc, &one, a, &la, b, &lb, &zero, d, &ld, d, &ld, nullptr, nullptr, 0, nullptr);
  }
};

}  // namespace

TEST_CASE("cublasLtMatmul with E4M3 operands and A/B scale pointers equals float64 over the decoded operands",
          "[cublaslt][fp8]") {
  reset_simulator(1);
  // TN: A stored k x m (a row-major [m, k] weight), B stored k x n; D m x n.
  // ldd: a whole number of 16-byte units for F32 and BF16 alike, as the
  // library's FP8 kernels require (a refused ldd is checked below).
  const int m = 32, n = 7, k = 48, ldd = m + 8;
  const std::vector<__nv_fp8_e4m3> a = to_e4m3(random_floats(static_cast<size_t>(k) * m, 51, -448.0f, 448.0f));
  const std::vector<__nv_fp8_e4m3> b = to_e4m3(random_floats(static_cast<size_t>(k) * n, 53, -3.0f, 3.0f));
  const std::vector<float> scales = {0.015625f, 0.37f};
  device_buffer<__nv_fp8_e4m3> d_a(a), d_b(b);
  // One allocation per scale: the library wants each scale pointer aligned.
  device_buffer<float> d_a_scale(std::vector<float>{scales[0]}), d_b_scale(std::vector<float>{scales[1]});
  Fp8Matmul mm(CUBLAS_OP_T, CUBLAS_OP_N);
  mm.set_scales(d_a_scale.get(), d_b_scale.get());
  for (const cudaDataType out_type : {CUDA_R_32F, CUDA_R_16BF}) {
    INFO("output type " << out_type);
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&ld, out_type, m, n, ldd) == CUBLAS_STATUS_SUCCESS);
    const size_t out_bytes = out_type == CUDA_R_32F ? 4 : 2;
    device_buffer<unsigned char> d_d(static_cast<size_t>(ldd) * n * out_bytes);
    const float alpha = 2.0f, beta = 0.0f;
    REQUIRE(cublasLtMatmul(mm.handle, mm.desc, &alpha, d_a.get(), la, d_b.get(), lb, &beta, d_d.get(), ld, d_d.get(),
                           ld, nullptr, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
    const std::vector<unsigned char> raw = d_d.download();
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0, mag = 0;
        for (int l = 0; l < k; ++l) {
          const double p = static_cast<double>(static_cast<float>(a[i * k + l])) * static_cast<float>(b[j * k + l]);
          acc += p;
          mag += std::fabs(p);
        }
        const double scale = alpha * static_cast<double>(scales[0]) * scales[1];
        const double want = scale * acc;
        const size_t at = static_cast<size_t>(i) + static_cast<size_t>(j) * ldd;
        double got;
        if (out_type == CUDA_R_32F) {
          float f;
          std::memcpy(&f, raw.data() + 4 * at, 4);
          got = f;
        } else {
          __nv_bfloat16 h;
          std::memcpy(&h, raw.data() + 2 * at, 2);
          got = __bfloat162float(h);
        }
        // Decoded E4M3 products are exact in float; only the float sum (and the
        // bf16 output's rounding, 2^-9 relative) remain.
        const double tol = scale * mag * 1e-6 + (out_type == CUDA_R_16BF ? std::fabs(want) * std::ldexp(1.0, -8) : 0);
        REQUIRE(std::fabs(got - want) <= tol);
      }
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
  }
}

TEST_CASE("An FP8 product captured in a graph reads its scales when it replays, not when it was recorded",
          "[cublaslt][fp8]") {
  reset_simulator(1);
  const int m = 16, n = 3, k = 16;
  const std::vector<__nv_fp8_e4m3> a = to_e4m3(random_floats(static_cast<size_t>(k) * m, 61, -4.0f, 4.0f));
  const std::vector<__nv_fp8_e4m3> b = to_e4m3(random_floats(static_cast<size_t>(k) * n, 63, -4.0f, 4.0f));
  device_buffer<__nv_fp8_e4m3> d_a(a), d_b(b);
  device_buffer<float> d_scale(std::vector<float>{1.0f}), d_d(static_cast<size_t>(m) * n);
  Fp8Matmul mm(CUBLAS_OP_T, CUBLAS_OP_N);
  mm.set_scales(nullptr, d_scale.get());
  cublasLtMatrixLayoutOpaque_t la, lb, ld;
  REQUIRE(cublasLtMatrixLayoutInit(&la, CUDA_R_8F_E4M3, k, m, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutInit(&lb, CUDA_R_8F_E4M3, k, n, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutInit(&ld, CUDA_R_32F, m, n, m) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cublasLtMatmul(mm.handle, mm.desc, &one, d_a.get(), &la, d_b.get(), &lb, &zero, d_d.get(), &ld, d_d.get(),
                         &ld, nullptr, nullptr, 0, stream) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  const std::vector<float> unscaled = d_d.download();
  cudaGraph_t graph;
  CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  REQUIRE(cublasLtMatmul(mm.handle, mm.desc, &one, d_a.get(), &la, d_b.get(), &lb, &zero, d_d.get(), &ld, d_d.get(),
                         &ld, nullptr, nullptr, 0, stream) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  d_scale.upload({0.25f});
  CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  const std::vector<float> scaled = d_d.download();
  for (size_t i = 0; i < scaled.size(); ++i) REQUIRE(scaled[i] == unscaled[i] * 0.25f);  // a power of two: exact
  CUDA_REQUIRE(cudaGraphExecDestroy(exec));
  CUDA_REQUIRE(cudaGraphDestroy(graph));
  CUDA_REQUIRE(cudaStreamDestroy(stream));
}

// The library's own rule, checked on a GPU and in the simulation alike: an
// FP8 product's D needs a leading dimension of whole 16-byte units.
TEST_CASE("cublasLtMatmul refuses an FP8 product whose D leading dimension is not a multiple of 16 bytes",
          "[cublaslt][fp8]") {
  reset_simulator(1);
  const int m = 32, n = 4, k = 32;
  device_buffer<__nv_fp8_e4m3> d_a(static_cast<size_t>(k) * m), d_b(static_cast<size_t>(k) * n);
  device_buffer<float> d_d(static_cast<size_t>(m + 8) * n);
  Fp8Matmul mm(CUBLAS_OP_T, CUBLAS_OP_N);
  for (const int ldd : {m + 5, m + 4}) {
    INFO("ldd " << ldd);
    CHECK(mm.run_tn(d_a.get(), d_b.get(), d_d.get(), m, n, k, ldd) ==
          (ldd * 4 % 16 == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED));
  }
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

// Likewise a scale pointer: at the start of an allocation it is taken, 4
// bytes into one it is refused (seen on an H200 with cuBLASLt 13.0; the
// simulation asks for 16-byte alignment, as for A and B).
TEST_CASE("cublasLtMatmul refuses an FP8 scale pointer that is not 16-byte aligned", "[cublaslt][fp8]") {
  reset_simulator(1);
  const int m = 32, n = 4, k = 32;
  device_buffer<__nv_fp8_e4m3> d_a(static_cast<size_t>(k) * m), d_b(static_cast<size_t>(k) * n);
  device_buffer<float> d_d(static_cast<size_t>(m) * n), d_scales(std::vector<float>(8, 1.0f));
  for (const int offset : {0, 1}) {
    INFO("scale pointer " << 4 * offset << " bytes into its allocation");
    Fp8Matmul mm(CUBLAS_OP_T, CUBLAS_OP_N);
    mm.set_scales(nullptr, d_scales.get() + offset);
    CHECK(mm.run_tn(d_a.get(), d_b.get(), d_d.get(), m, n, k, m) ==
          (offset == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED));
  }
  CUDA_REQUIRE(cudaDeviceSynchronize());
}

#if !LLMK_CUDA_NATIVE
// What the simulated FP8 subset refuses, with its messages: simulation only
// (a host scale pointer is not something to hand the real library).
TEST_CASE("cublasLtMatmul refuses FP8 outside the TN form, with unaligned shapes, and scale pointers on BF16",
          "[cublaslt][fp8]") {
  reset_simulator(1);
  device_buffer<__nv_fp8_e4m3> fp8(64 * 64);
  device_buffer<__nv_bfloat16> bf16(64 * 64);
  device_buffer<float> d(64 * 64), scale(std::vector<float>{1.0f});
  const float one = 1.0f, zero = 0.0f;
  auto run = [&](int32_t op_a, cudaDataType type, int m, int k, int ld_ab, const float* a_scale) {
    Fp8Matmul mm(op_a, CUBLAS_OP_N);
    mm.set_scales(a_scale, nullptr);
    cublasLtMatrixLayoutOpaque_t la, lb, ldl;
    const bool t = op_a == CUBLAS_OP_T;
    REQUIRE(cublasLtMatrixLayoutInit(&la, type, t ? k : m, t ? m : k, ld_ab) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutInit(&lb, type, k, 2, ld_ab) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutInit(&ldl, CUDA_R_32F, m, 2, m) == CUBLAS_STATUS_SUCCESS);
    const void* ab = type == CUDA_R_16BF ? static_cast<const void*>(bf16.get()) : static_cast<const void*>(fp8.get());
    return cublasLtMatmul(mm.handle, mm.desc, &one, ab, &la, ab, &lb, &zero, d.get(), &ldl, d.get(), &ldl, nullptr,
                          nullptr, 0, nullptr);
  };
  CHECK(run(CUBLAS_OP_T, CUDA_R_8F_E4M3, 32, 32, 32, scale.get()) == CUBLAS_STATUS_SUCCESS);
  CHECK(run(CUBLAS_OP_N, CUDA_R_8F_E4M3, 32, 32, 32, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cudasim::last_error_detail().find("TN") != std::string::npos);
  CHECK(run(CUBLAS_OP_T, CUDA_R_8F_E4M3, 32, 24, 32, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);  // k % 16
  CHECK(cudasim::last_error_detail().find("multiples of 16") != std::string::npos);
  CHECK(run(CUBLAS_OP_T, CUDA_R_8F_E4M3, 20, 32, 32, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);  // m % 16
  CHECK(run(CUBLAS_OP_T, CUDA_R_8F_E4M3, 32, 32, 40, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);  // ld % 16
  CHECK(run(CUBLAS_OP_T, CUDA_R_16BF, 32, 32, 32, scale.get()) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cudasim::last_error_detail().find("FP8 operands only") != std::string::npos);
  std::vector<float> host(1, 1.0f);
  CHECK(run(CUBLAS_OP_T, CUDA_R_8F_E4M3, 32, 32, 32, host.data()) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cudasim::last_error_detail().find("scale pointer is not device memory") != std::string::npos);
}
#endif  // !LLMK_CUDA_NATIVE
