// The cuBLASLt subset a linear layer uses (cublasLt.h's declarations):
// handles, matmul descriptors with transposes, matrix layouts (column-major,
// leading dimension, strided batches), a preference with a workspace limit,
// a heuristic that offers one algorithm, and cublasLtMatmul over F32, F16
// and BF16 with F32 compute, D = alpha op(A) op(B) + beta C, in the type
// combinations the library offers (A and B of one type; F16 and BF16 give
// their own type or F32). The FAST compute types (FAST_TF32, FAST_16F,
// FAST_16BF; F32 matrices only) round A and B to TF32, F16 or BF16 before
// the products, as the tensor cores do. The descriptors keep their fields in
// the toolkit's own opaque structs.
//
// FP8 (Hopper and Ada): A and B in E4M3 or E5M2 (not both E5M2), C and D in
// F32, F16 or BF16, with the per-tensor scale pointers
// CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER (device floats, read
// when the product runs): D = alpha scale_a scale_b op(A) op(B) + beta C.
// The library's FP8 restrictions are enforced, so a caller that passes here
// passes there: the "TN" form (A transposed, B not), F32 compute, m and k
// multiples of 16, lda and ldb multiples of 16, A and B 16-byte aligned,
// C and D 16-byte aligned with ldc and ldd whole multiples of 16 bytes, and
// 16-byte aligned scale pointers. On an H200 cuBLASLt 13.0 refused an F32 D
// with ldd 37 and a scale pointer 4 bytes into its allocation (both
// CUBLAS_STATUS_NOT_SUPPORTED), and took ldd 36 and a scale pointer at the
// start of one.
//
// Attributes the subset does not model (epilogues other than the default,
// C/D scale pointers, fast accumulation, scale modes, other orders) are
// refused with CUBLAS_STATUS_NOT_SUPPORTED, so a caller that needs them fails
// here instead of computing something else.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "internal.hpp"

struct cublasLtContext {
  int magic = 0x4c74;
};

namespace {

using cudasim::detail::set_error;

constexpr std::uint64_t kAlgoId = 0x51;  // the one algorithm offered

// Fields of the opaque structs.
enum layout_field { lf_type, lf_rows, lf_cols, lf_ld, lf_batch, lf_stride };
enum desc_field { df_compute, df_scale, df_transa, df_transb, df_epilogue, df_a_scale, df_b_scale };
enum pref_field { pf_workspace };

cublasStatus_t refuse(cublasStatus_t status, const std::string& what) {
  set_error(cudaSuccess, "cuBLASLt (simulated): " + what);
  return status;
}

template <class T>
bool read_value(const void* buf, size_t size, T* out) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

struct matrix {
  cudaDataType type;
  std::int64_t rows, cols, ld, batch, stride;
};

matrix matrix_of(cublasLtMatrixLayout_t l) {
  return {static_cast<cudaDataType>(l->data[lf_type]), static_cast<std::int64_t>(l->data[lf_rows]),
          static_cast<std::int64_t>(l->data[lf_cols]), static_cast<std::int64_t>(l->data[lf_ld]),
          static_cast<std::int64_t>(l->data[lf_batch]), static_cast<std::int64_t>(l->data[lf_stride])};
}

std::size_t elem_bytes(cudaDataType t) {
  return t == CUDA_R_32F ? 4 : cudasim::detail::gemm_fp8_type(t) ? 1 : 2;
}

bool layout_type_supported(cudaDataType t) {
  return cudasim::detail::gemm_type_supported(t) || cudasim::detail::gemm_fp8_type(t);
}

// Bytes a column-major matrix spans in memory (every batch).
std::size_t span_bytes(const matrix& m) {
  if (m.rows == 0 || m.cols == 0) return 0;
  const std::int64_t last = (m.batch - 1) * m.stride + (m.cols - 1) * m.ld + m.rows;
  return static_cast<std::size_t>(last) * elem_bytes(m.type);
}

// Why the library would refuse this FP8 product ("" if it would not).
std::string fp8_refusal(cublasLtMatmulDesc_t desc, cublasOperation_t ta, cublasOperation_t tb, const matrix& a,
                        const matrix& b, const matrix& c, const matrix& d, std::int64_t m, std::int64_t k,
                        const void* A, const void* B, const void* C, const void* D) {
  using cudasim::detail::gemm_fp8_type;
  if (!gemm_fp8_type(a.type) || !gemm_fp8_type(b.type)) return "A and B must both be E4M3 or E5M2";
  if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2) return "A and B cannot both be E5M2";
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N) return "needs A transposed and B not (the TN form)";
  if (desc->data[df_compute] != CUBLAS_COMPUTE_32F) return "needs CUBLAS_COMPUTE_32F";
  if (m % 16 != 0 || k % 16 != 0)
    return "m (" + std::to_string(m) + ") and k (" + std::to_string(k) + ") must be multiples of 16";
  if (a.ld % 16 != 0 || b.ld % 16 != 0) return "lda and ldb must be multiples of 16";
  if (reinterpret_cast<std::uintptr_t>(A) % 16 != 0 || reinterpret_cast<std::uintptr_t>(B) % 16 != 0)
    return "A and B must be 16-byte aligned";
  if (c.ld * elem_bytes(c.type) % 16 != 0 || d.ld * elem_bytes(d.type) % 16 != 0)
    return "ldc and ldd must be multiples of 16 bytes (ldd " + std::to_string(d.ld) + " elements of " +
           std::to_string(elem_bytes(d.type)) + " bytes)";
  if (reinterpret_cast<std::uintptr_t>(C) % 16 != 0 || reinterpret_cast<std::uintptr_t>(D) % 16 != 0)
    return "C and D must be 16-byte aligned";
  return "";
}

}  // namespace

// The non-FP8 combinations cuBLASLt offers (its cublasLtMatmul table):
// F32 compute over A/B F32 with C/D F32, A/B F16 with C/D F16 or F32, A/B
// BF16 with C/D BF16 or F32; the FAST compute types over F32 only. Returns
// why a combination is refused ("" if offered).
static std::string combination_refusal(cublasComputeType_t compute, cudaDataType a, cudaDataType b, cudaDataType d) {
  const auto name = [](cudaDataType t) {
    return t == CUDA_R_32F ? "F32" : t == CUDA_R_16F ? "F16" : t == CUDA_R_16BF ? "BF16" : "another type";
  };
  if (a != b) return std::string("A is ") + name(a) + " and B " + name(b) + ": A and B must share a type";
  const bool fast = compute != CUBLAS_COMPUTE_32F;
  const bool offered = fast ? a == CUDA_R_32F && d == CUDA_R_32F : d == a || d == CUDA_R_32F;
  if (offered) return {};
  return std::string("A/B ") + name(a) + " with C/D " + name(d) + (fast ? " under a FAST compute type" : "") +
         " is not a combination cuBLASLt offers" +
         (fast ? " (FAST_TF32, FAST_16F and FAST_16BF take F32 A/B/C/D)" : " (C/D as A/B, or F32)");
}

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16F &&
      compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only F32 compute types are simulated");
  if (scale != CUDA_R_32F) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only an F32 scale type is simulated");
  auto* d = new cublasLtMatmulDescOpaque_t{};
  d->data[df_compute] = static_cast<std::uint64_t>(compute);
  d->data[df_scale] = static_cast<std::uint64_t>(scale);
  d->data[df_transa] = CUBLAS_OP_N;
  d->data[df_transb] = CUBLAS_OP_N;
  d->data[df_epilogue] = CUBLASLT_EPILOGUE_DEFAULT;
  *desc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      std::int32_t op = 0;
      if (!read_value(buf, size, &op)) return CUBLAS_STATUS_INVALID_VALUE;
      if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only N and T ops");
      desc->data[attr == CUBLASLT_MATMUL_DESC_TRANSA ? df_transa : df_transb] = static_cast<std::uint64_t>(op);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      std::uint32_t epilogue = 0;
      if (!read_value(buf, size, &epilogue)) return CUBLAS_STATUS_INVALID_VALUE;
      if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only the default epilogue");
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: {
      const void* p = nullptr;
      if (!read_value(buf, size, &p)) return CUBLAS_STATUS_INVALID_VALUE;
      desc->data[attr == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER ? df_a_scale : df_b_scale] =
          reinterpret_cast<std::uintptr_t>(p);
      return CUBLAS_STATUS_SUCCESS;
    }
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul attribute " + std::to_string(static_cast<int>(attr)) +
                                                     " is not simulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  if (!layout_type_supported(type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only F32, F16, BF16, E4M3 and E5M2 matrices are simulated");
  if (ld < static_cast<int64_t>(std::max<uint64_t>(1, rows))) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new cublasLtMatrixLayoutOpaque_t{};
  l->data[lf_type] = static_cast<std::uint64_t>(type);
  l->data[lf_rows] = rows;
  l->data[lf_cols] = cols;
  l->data[lf_ld] = static_cast<std::uint64_t>(ld);
  l->data[lf_batch] = 1;
  l->data[lf_stride] = 0;
  *layout = l;
  return CUBLAS_STATUS_SUCCESS;
}

// The in-place form behind cublasLtMatrixLayoutInit (no allocation).
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld) {
  if (!layout || size != sizeof(cublasLtMatrixLayoutOpaque_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!layout_type_supported(type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only F32, F16, BF16, E4M3 and E5M2 matrices are simulated");
  if (ld < static_cast<int64_t>(std::max<uint64_t>(1, rows))) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = cublasLtMatrixLayoutOpaque_t{};
  layout->data[lf_type] = static_cast<std::uint64_t>(type);
  layout->data[lf_rows] = rows;
  layout->data[lf_cols] = cols;
  layout->data[lf_ld] = static_cast<std::uint64_t>(ld);
  layout->data[lf_batch] = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      std::int32_t order = 0;
      if (!read_value(buf, size, &order)) return CUBLAS_STATUS_INVALID_VALUE;
      if (order != CUBLASLT_ORDER_COL) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "only column-major order");
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      std::int32_t batch = 0;
      if (!read_value(buf, size, &batch) || batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
      layout->data[lf_batch] = static_cast<std::uint64_t>(batch);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: {
      std::int64_t stride = 0;
      if (!read_value(buf, size, &stride) || stride < 0) return CUBLAS_STATUS_INVALID_VALUE;
      layout->data[lf_stride] = static_cast<std::uint64_t>(stride);
      return CUBLAS_STATUS_SUCCESS;
    }
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute " + std::to_string(static_cast<int>(attr)) +
                                                     " is not simulated");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute " + std::to_string(static_cast<int>(attr)) +
                                                   " is not simulated");
  std::uint64_t bytes = 0;
  if (!read_value(buf, size, &bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  pref->data[pf_workspace] = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !pref || requested < 1 || !results || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoId;
  results[0].workspaceSize = 0;  // the simulated product needs none
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !alpha || !beta || !a_layout || !b_layout || !c_layout || !d_layout)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a null descriptor or scale");
  if (algo != nullptr && algo->data[0] != kAlgoId)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: an algorithm the heuristic did not offer");
  if (workspace_bytes != 0 && workspace == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a workspace size with no workspace");
  const auto ta = static_cast<cublasOperation_t>(desc->data[df_transa]);
  const auto tb = static_cast<cublasOperation_t>(desc->data[df_transb]);
  const matrix a = matrix_of(a_layout), b = matrix_of(b_layout), c = matrix_of(c_layout), d = matrix_of(d_layout);
  // op(A): m x k, op(B): k x n, C and D: m x n.
  const std::int64_t m = ta == CUBLAS_OP_N ? a.rows : a.cols, k = ta == CUBLAS_OP_N ? a.cols : a.rows;
  const std::int64_t kb = tb == CUBLAS_OP_N ? b.rows : b.cols, n = tb == CUBLAS_OP_N ? b.cols : b.rows;
  if (kb != k || c.rows != m || c.cols != n || d.rows != m || d.cols != n)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: op(A) is " + std::to_string(m) + "x" +
                                                   std::to_string(k) + ", op(B) " + std::to_string(kb) + "x" +
                                                   std::to_string(n) + ", D " + std::to_string(d.rows) + "x" +
                                                   std::to_string(d.cols) + ": the shapes do not agree");
  if (a.batch != b.batch || a.batch != c.batch || a.batch != d.batch)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the batch counts differ");
  const auto compute = static_cast<cublasComputeType_t>(desc->data[df_compute]);
  if (c.type != d.type) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: C and D must share a type");
  if (!cudasim::detail::gemm_type_supported(d.type))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: D must be F32, F16 or BF16 (FP8 outputs are not simulated)");
  const auto* a_scale = reinterpret_cast<const float*>(static_cast<std::uintptr_t>(desc->data[df_a_scale]));
  const auto* b_scale = reinterpret_cast<const float*>(static_cast<std::uintptr_t>(desc->data[df_b_scale]));
  using cudasim::detail::gemm_fp8_type;
  if (gemm_fp8_type(a.type) || gemm_fp8_type(b.type)) {
    if (const std::string why = fp8_refusal(desc, ta, tb, a, b, c, d, m, k, A, B, C, D); !why.empty())
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul (FP8): " + why);
    for (const auto& [p, name] : {std::pair<const float*, const char*>{a_scale, "A"}, {b_scale, "B"}}) {
      if (p != nullptr && !cudasim::detail::is_device_range(p, sizeof(float)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      std::string("cublasLtMatmul: the ") + name + " scale pointer is not device memory");
      if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      std::string("cublasLtMatmul (FP8): the ") + name + " scale pointer must be 16-byte aligned");
    }
  } else if (a_scale != nullptr || b_scale != nullptr) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: A/B scale pointers apply to FP8 operands only");
  } else if (const std::string why = combination_refusal(compute, a.type, b.type, d.type); !why.empty()) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: " + why);
  }
  for (const auto& [p, mat, name] : {std::tuple<const void*, const matrix*, const char*>{A, &a, "A"},
                                     {B, &b, "B"}, {D, &d, "D"}})
    if (span_bytes(*mat) != 0 && !cudasim::detail::is_device_range(p, span_bytes(*mat)))
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string("cublasLtMatmul: ") + name + " is not inside one device allocation");
  const float beta_value = *static_cast<const float*>(beta);
  if (beta_value != 0.0f && span_bytes(c) != 0 && !cudasim::detail::is_device_range(C, span_bytes(c)))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: C is not inside one device allocation");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

  cudasim::detail::gemm_args g{};
  g.transa = ta;
  g.transb = tb;
  g.m = static_cast<int>(m);
  g.n = static_cast<int>(n);
  g.k = static_cast<int>(k);
  g.alpha = *static_cast<const float*>(alpha);
  g.beta = beta_value;
  g.a = A, g.a_type = a.type, g.lda = static_cast<int>(a.ld), g.stride_a = a.stride;
  g.b = B, g.b_type = b.type, g.ldb = static_cast<int>(b.ld), g.stride_b = b.stride;
  g.c = C, g.c_type = c.type, g.ldc = static_cast<int>(c.ld), g.stride_c = c.stride;
  g.d = D, g.d_type = d.type, g.ldd = static_cast<int>(d.ld), g.stride_d = d.stride;
  g.batch_count = static_cast<int>(a.batch);
  g.a_scale = a_scale;
  g.b_scale = b_scale;
  using rounding = cudasim::detail::gemm_args::rounding;
  g.input_rounding = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? rounding::tf32
                     : compute == CUBLAS_COMPUTE_32F_FAST_16F ? rounding::f16
                     : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? rounding::bf16
                                                               : rounding::none;
  cudasim::detail::enqueue(stream, [g] { cudasim::detail::run_gemm(g); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
