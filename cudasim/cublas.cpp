// The cuBLAS subset (cublas_v2.h's declarations): handles, streams, and the
// mixed-precision GEMMs in column-major order with transposes, leading
// dimensions and strided batches. Products and sums run in float, as
// CUBLAS_COMPUTE_32F does; the summation order is not cuBLAS's, so compare
// against a reference with a tolerance, never bit for bit.
#include <cublas_v2.h>
#include <cuda_fp8.h>

#include <cmath>

#include "internal.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace cudasim::detail {

bool gemm_type_supported(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }
bool gemm_fp8_type(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

namespace {

float load(const void* p, cudaDataType t, std::int64_t i) {
  switch (t) {
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_8F_E4M3: return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case CUDA_R_8F_E5M2: return static_cast<float>(static_cast<const __nv_fp8_e5m2*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store(void* p, cudaDataType t, std::int64_t i, float v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// An F32 input as a FAST compute type's tensor cores see it.
float round_input(float v, gemm_args::rounding r) {
  switch (r) {
    case gemm_args::rounding::tf32: {
      // 10 mantissa bits, to nearest even; NaN and infinities kept.
      if (!std::isfinite(v)) return v;
      std::uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & 0xffffe000u;
      std::memcpy(&v, &bits, sizeof v);
      return v;
    }
    case gemm_args::rounding::f16: return __half2float(__float2half_rn(v));
    case gemm_args::rounding::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}

}  // namespace

void run_gemm(const gemm_args& g) {
  const float ab_scale = (g.a_scale != nullptr ? *g.a_scale : 1.0f) * (g.b_scale != nullptr ? *g.b_scale : 1.0f);
  for (int batch = 0; batch < g.batch_count; ++batch) {
    const std::int64_t a0 = batch * g.stride_a, b0 = batch * g.stride_b, c0 = batch * g.stride_c,
                       d0 = batch * g.stride_d;
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < g.k; ++l) {
          const std::int64_t ai = g.transa == CUBLAS_OP_N ? i + std::int64_t{l} * g.lda : l + std::int64_t{i} * g.lda;
          const std::int64_t bi = g.transb == CUBLAS_OP_N ? l + std::int64_t{j} * g.ldb : j + std::int64_t{l} * g.ldb;
          acc += round_input(load(g.a, g.a_type, a0 + ai), g.input_rounding) *
                 round_input(load(g.b, g.b_type, b0 + bi), g.input_rounding);
        }
        // beta == 0: C is not read (it may hold NaN), as in cuBLAS.
        acc *= ab_scale;
        const float out = g.beta == 0.0f
                              ? g.alpha * acc
                              : g.alpha * acc + g.beta * load(g.c, g.c_type, c0 + i + std::int64_t{j} * g.ldc);
        store(g.d, g.d_type, d0 + i + std::int64_t{j} * g.ldd, out);
      }
  }
}

}  // namespace cudasim::detail

namespace {

using cudasim::detail::gemm_args;
using cudasim::detail::gemm_type_supported;

cublasStatus_t gemm(cublasHandle_t handle, gemm_args g, const void* alpha, const void* beta,
                    cublasComputeType_t compute) {
  using cudasim::detail::set_error;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool compute_ok = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                          compute == CUBLAS_COMPUTE_32F_FAST_16BF || compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                          compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  if (!compute_ok || !gemm_type_supported(g.a_type) || !gemm_type_supported(g.b_type) ||
      !gemm_type_supported(g.c_type)) {
    set_error(cudaSuccess, "cublasGemmEx: only F32/F16/BF16 data with F32 compute is simulated");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  const int a_rows = g.transa == CUBLAS_OP_N ? g.m : g.k;
  const int b_rows = g.transb == CUBLAS_OP_N ? g.k : g.n;
  if (!valid_op(g.transa) || !valid_op(g.transb) || g.m < 0 || g.n < 0 || g.k < 0 || g.batch_count < 0 ||
      g.lda < std::max(1, a_rows) || g.ldb < std::max(1, b_rows) || g.ldc < std::max(1, g.m) || !alpha || !beta) {
    set_error(cudaSuccess, "cublasGemmEx: invalid sizes, leading dimensions or operations");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g.m == 0 || g.n == 0 || g.batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  g.alpha = *static_cast<const float*>(alpha);
  g.beta = *static_cast<const float*>(beta);
  using cudasim::detail::run_gemm;
  cudasim::detail::enqueue(handle->stream, [g] { run_gemm(g); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void*, size_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle,
              {transa, transb, m, n, k, 0, 0, A, Atype, lda, 0, B, Btype, ldb, 0, C, Ctype, ldc, 0, C, Ctype, ldc, 0, 1},
              alpha, beta, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle,
              {transa, transb, m, n, k, 0, 0, A, Atype, lda, strideA, B, Btype, ldb, strideB, C, Ctype, ldc, strideC, C,
               Ctype, ldc, strideC, batchCount},
              alpha, beta, computeType);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown cuBLAS status";
  }
}

}  // extern "C"
