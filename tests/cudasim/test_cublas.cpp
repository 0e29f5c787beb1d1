// The cuBLAS subset: cublasGemmEx and cublasGemmStridedBatchedEx in
// column-major order, every transpose combination, odd sizes, leading
// dimensions above the row count, F32/F16/BF16 inputs with F32 compute,
// against a float64 reference of the same (rounded) inputs.
#include <cublas_v2.h>

#include <cmath>

#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

struct dtype_case {
  cudaDataType type;
  const char* name;
  std::size_t bytes;
};

// Rounds v to `type` and writes it at p[i]; returns the rounded value.
float put(void* p, cudaDataType type, std::size_t i, float v) {
  if (type == CUDA_R_16F) return __half2float(static_cast<__half*>(p)[i] = __float2half_rn(v));
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v));
  return static_cast<float*>(p)[i] = v;
}
float get(const void* p, cudaDataType type, std::size_t i) {
  if (type == CUDA_R_16F) return __half2float(static_cast<const __half*>(p)[i]);
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Output rounding tolerance per dtype (relative), plus float accumulation.
double output_tolerance(cudaDataType type) {
  return type == CUDA_R_16F ? 1.0 / 1024 : type == CUDA_R_16BF ? 1.0 / 128 : 0.0;
}

void check_gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int batch,
                dtype_case in, dtype_case out, float alpha, float beta) {
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  const int lda = a_rows + 3, ldb = b_rows + 1, ldc = m + 2;  // leading dimensions above the row counts
  const long long stride_a = static_cast<long long>(lda) * a_cols + 5, stride_b = static_cast<long long>(ldb) * b_cols,
                  stride_c = static_cast<long long>(ldc) * n + 7;
  const std::size_t a_elems = stride_a * batch, b_elems = stride_b * batch, c_elems = stride_c * batch;
  std::vector<unsigned char> a(a_elems * in.bytes), b(b_elems * in.bytes), c(c_elems * out.bytes);
  std::vector<float> a_val(a_elems), b_val(b_elems), c_val(c_elems);
  const auto ra = random_floats(a_elems, m * 7 + k), rb = random_floats(b_elems, n * 5 + k), rc = random_floats(c_elems, m + n);
  for (std::size_t i = 0; i < a_elems; ++i) a_val[i] = put(a.data(), in.type, i, ra[i]);
  for (std::size_t i = 0; i < b_elems; ++i) b_val[i] = put(b.data(), in.type, i, rb[i]);
  for (std::size_t i = 0; i < c_elems; ++i) c_val[i] = put(c.data(), out.type, i, rc[i]);
  device_buffer<unsigned char> da(a), db(b), dc(c);
  const cublasStatus_t status =
      batch == 1 ? cublasGemmEx(handle, ta, tb, m, n, k, &alpha, da.get(), in.type, lda, db.get(), in.type, ldb, &beta,
                                dc.get(), out.type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                 : cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, &alpha, da.get(), in.type, lda, stride_a,
                                              db.get(), in.type, ldb, stride_b, &beta, dc.get(), out.type, ldc,
                                              stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  REQUIRE(status == CUBLAS_STATUS_SUCCESS);
  const auto got = dc.download();
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0.0, scale = 0.0;
        for (int l = 0; l < k; ++l) {
          const double av = ta == CUBLAS_OP_N ? a_val[p * stride_a + i + std::size_t{1} * l * lda] : a_val[p * stride_a + l + std::size_t{1} * i * lda];
          const double bv = tb == CUBLAS_OP_N ? b_val[p * stride_b + l + std::size_t{1} * j * ldb] : b_val[p * stride_b + j + std::size_t{1} * l * ldb];
          acc += av * bv;
          scale += std::abs(av * bv);
        }
        const std::size_t ci = p * stride_c + i + std::size_t{1} * j * ldc;
        const double want = alpha * acc + (beta == 0.0f ? 0.0 : beta * c_val[ci]);
        const double tolerance = (k + 2) * 1.2e-7 * (std::abs(alpha) * scale + std::abs(beta * c_val[ci])) +
                                 output_tolerance(out.type) * std::abs(want) + 1e-6;
        INFO("batch " << p << " i " << i << " j " << j);
        REQUIRE(std::abs(get(got.data(), out.type, ci) - want) <= tolerance);
      }
  // Elements between the columns (ld padding) and between batches are untouched.
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = m; i < ldc && p * stride_c + i + std::size_t{1} * j * ldc < c_elems; ++i) {
        const std::size_t ci = p * stride_c + i + std::size_t{1} * j * ldc;
        REQUIRE(get(got.data(), out.type, ci) == c_val[ci]);
      }
}

}  // namespace

TEST_CASE("cublasGemmEx matches float64 for every transpose pair, odd sizes and padded leading dimensions") {
  reset_simulator(1);
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const dtype_case f32{CUDA_R_32F, "f32", 4}, f16{CUDA_R_16F, "f16", 2}, bf16{CUDA_R_16BF, "bf16", 2};
  struct shape {
    int m, n, k;
  };
  for (const auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (const auto tb : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (const shape s : {shape{1, 1, 1}, shape{7, 5, 3}, shape{33, 17, 29}})
        for (const auto& [in, out] : {std::pair{f32, f32}, std::pair{f16, f32}, std::pair{bf16, f32},
                                      std::pair{f16, f16}, std::pair{bf16, bf16}}) {
          INFO("ta " << ta << " tb " << tb << " m " << s.m << " n " << s.n << " k " << s.k << " in " << in.name
                     << " out " << out.name);
          check_gemm(handle, ta, tb, s.m, s.n, s.k, 1, in, out, 1.0f, 0.0f);
          check_gemm(handle, ta, tb, s.m, s.n, s.k, 1, in, out, 0.5f, -2.0f);
        }
  REQUIRE(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("cublasGemmStridedBatchedEx matches float64 per batch and leaves the gaps between batches alone") {
  reset_simulator(1);
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  REQUIRE(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS);
  const dtype_case f32{CUDA_R_32F, "f32", 4}, bf16{CUDA_R_16BF, "bf16", 2};
  for (const auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (const auto tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      INFO("ta " << ta << " tb " << tb);
      check_gemm(handle, ta, tb, 9, 6, 13, 3, f32, f32, 1.0f, 1.0f);
      check_gemm(handle, ta, tb, 4, 11, 8, 4, bf16, f32, 2.0f, 0.0f);
    }
  REQUIRE(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaStreamDestroy(stream));
}

#if !LLMK_CUDA_NATIVE
// What the simulated subset refuses: simulation only (real cuBLAS serves
// float64 GEMMs).
TEST_CASE("cublasGemmEx rejects leading dimensions below the row count and unsupported types") {
  reset_simulator(1);
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  device_buffer<float> a(64), b(64), c(64);
  const float one = 1.0f, zero = 0.0f;
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.get(), CUDA_R_32F, 3, b.get(), CUDA_R_32F, 4,
                       &zero, c.get(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 5, &one, a.get(), CUDA_R_32F, 4, b.get(), CUDA_R_32F, 5,
                       &zero, c.get(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.get(), CUDA_R_64F, 4, b.get(), CUDA_R_64F, 4,
                       &zero, c.get(), CUDA_R_64F, 4, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  REQUIRE(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
}
#endif  // !LLMK_CUDA_NATIVE
