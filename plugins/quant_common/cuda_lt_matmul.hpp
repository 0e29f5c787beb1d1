// One cuBLASLt product in the "TN" form a linear layer uses, for the CUDA
// linear plugins (linear.cublas, linear.cuda_int4's prefill, linear.cuda_fp8):
// D (m x n, column-major, ld ldd) = scale_a scale_b op(A) op(B) with A stored
// column-major k x m (a row-major [m, k] weight, op T) and B column-major
// k x n (row-major [n, k] activations, op N); F32 compute, D in F32 or the
// 16-bit type the caller names.
// Row-major y[n, m] = x[n, k] W^T is exactly that D.
//
// One handle per layer (host memory only; no lock needed); the heuristic's
// choice is cached per (m, n, k). Host code only: it enqueues on the caller's
// stream and never synchronizes.
#pragma once

#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "plugins/quant_common/cuda_quant_common.hpp"

namespace llmk::cuda_quant {

constexpr size_t kLtWorkspaceBytes = size_t{8} << 20;  // offered to cuBLASLt's heuristic, carved from the caller's

inline void check_lt(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(LLMK_ERR_INTERNAL, what + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

class LtMatmul {
 public:
  LtMatmul() {
    try {
      check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
      check_lt(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      const int32_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
      check_lt(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
               "setting TRANSA");
      check_lt(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)),
               "setting TRANSB");
      check_lt(cublasLtMatmulPreferenceCreate(&preference_), "cublasLtMatmulPreferenceCreate");
      const uint64_t limit = kLtWorkspaceBytes;
      check_lt(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit,
                                                    sizeof(limit)),
               "setting the workspace limit");
    } catch (...) {
      release();
      throw;
    }
  }
  ~LtMatmul() { release(); }
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Per-tensor scales of FP8 operands: device pointers to one float, or null (1).
  void set_scales(const float* a_scale, const float* b_scale) {
    check_lt(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)),
             "setting the A scale pointer");
    check_lt(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)),
             "setting the B scale pointer");
  }

  // a: [m, lda >= k] row-major in in_type, b: [n, ldb >= k] row-major in
  // in_type, d: [n, ldd >= m] in d_type. workspace: kLtWorkspaceBytes device bytes.
  void run(cudaDataType in_type, const void* a, int64_t lda, const void* b, int64_t ldb, void* d, int64_t ldd,
           int64_t m, int64_t n, int64_t k, void* workspace, cudaStream_t stream, cudaDataType d_type = CUDA_R_32F) {
    cublasLtMatrixLayoutOpaque_t a_layout, b_layout, d_layout;
    check_lt(cublasLtMatrixLayoutInit(&a_layout, in_type, k, m, lda), "the weight's layout");
    check_lt(cublasLtMatrixLayoutInit(&b_layout, in_type, k, n, ldb), "the activations' layout");
    check_lt(cublasLtMatrixLayoutInit(&d_layout, d_type, m, n, ldd), "the output's layout");
    const cublasLtMatmulAlgo_t& algo = algorithm({m, n, k, in_type, d_type}, &a_layout, &b_layout, &d_layout);
    const float alpha = 1.0f, beta = 0.0f;
    check_lt(cublasLtMatmul(handle_, desc_, &alpha, a, &a_layout, b, &b_layout, &beta, d, &d_layout, d, &d_layout,
                            &algo, workspace, kLtWorkspaceBytes, stream),
             "cublasLtMatmul");
  }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, cudaDataType, cudaDataType>;

  // The heuristic's first choice for this shape, asked once.
  const cublasLtMatmulAlgo_t& algorithm(const Key& key, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                        cublasLtMatrixLayout_t d) {
    const auto found = algos_.find(key);
    if (found != algos_.end()) return found->second;
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a, b, d, d, preference_, 1, &result, &count),
             "cublasLtMatmulAlgoGetHeuristic");
    if (count == 0)
      throw Error(LLMK_ERR_UNSUPPORTED, "cuBLASLt offers no algorithm for m " + std::to_string(std::get<0>(key)) +
                                            ", n " + std::to_string(std::get<1>(key)) + ", k " +
                                            std::to_string(std::get<2>(key)));
    return algos_.emplace(key, result.algo).first->second;
  }

  void release() noexcept {
    if (preference_ != nullptr) cublasLtMatmulPreferenceDestroy(preference_);
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    preference_ = nullptr;
    desc_ = nullptr;
    handle_ = nullptr;
  }

  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace llmk::cuda_quant
