// linear.cublas: y = x W^T on a CUDA device through cuBLASLt.
//
// create() converts the checkpoint's weight on the host to the storage
// dtype (option "dtype": "auto" keeps the checkpoint's, or "f32", "bf16",
// "f16") and uploads it once. forward() enqueues on the caller's stream:
// with 16-bit weights and F32 activations it first rounds x to the weight's
// dtype in the workspace (kernels/cuda/convert.hpp), then one cuBLASLt
// matmul with F32 accumulation writes y in the activation dtype. The
// cuBLASLt workspace is carved from the caller's workspace too, so a
// forward allocates no device memory and never synchronizes.
//
// Row-major y[rows, out] = x[rows, in] W^T is, read column-major,
// y^T (out x rows) = W (out x in) x^T (in x rows): A is the weight stored
// row-major [out, in] (column-major in x out, ld in) with op T, B is x
// (column-major in x rows, ld in) with op N, D is y (out x rows, ld out).
//
// One cuBLASLt handle per layer: creating it costs host memory only, and a
// layer then needs no lock to share it. The algorithm the heuristic picks
// is cached per row count.
//
// The same source builds against the CUDA toolkit (the shipped plugin) and
// against the CUDA simulation (tests/cudasim_plugins).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "kernels/cuda/convert.hpp"
#include "plugins/api/plugin_helpers.hpp"

namespace llmk::linear_cublas {

namespace {

using plugin::Error;

constexpr size_t kAlign = 256;                         // every workspace region starts on 256 bytes
constexpr size_t kLtWorkspaceBytes = size_t{8} << 20;  // offered to cuBLASLt's heuristic

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool is_16bit(uint32_t dtype) { return dtype == LLMK_DTYPE_BF16 || dtype == LLMK_DTYPE_F16; }

const char* dtype_text(uint32_t dtype) {
  switch (dtype) {
    case LLMK_DTYPE_F32: return "f32";
    case LLMK_DTYPE_F16: return "f16";
    case LLMK_DTYPE_BF16: return "bf16";
    default: return "unsupported";
  }
}

cudaDataType cuda_type(uint32_t dtype) {
  return dtype == LLMK_DTYPE_F32 ? CUDA_R_32F : dtype == LLMK_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

size_t dtype_bytes(uint32_t dtype) { return dtype == LLMK_DTYPE_F32 ? 4 : 2; }

std::string layer_name(const llmk_linear_desc& d) { return d.name != nullptr ? d.name : "(unnamed layer)"; }

void check_lt(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(LLMK_ERR_INTERNAL, what + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw Error(LLMK_ERR_INTERNAL, what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// The storage dtype the options ask for; throws naming a bad option.
uint32_t storage_dtype(const llmk_linear_desc& d) {
  const char* text = d.options != nullptr && d.options[0] != '\0' ? d.options : "{}";
  const nlohmann::json options = nlohmann::json::parse(text, nullptr, false);
  if (options.is_discarded() || !options.is_object())
    throw Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": plugin options are not a JSON object: " + text);
  for (const auto& item : options.items())
    if (item.key() != "dtype")
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  layer_name(d) + ": unknown plugin option \"" + item.key() + "\" (known: dtype)");
  const std::string want = options.value("dtype", "auto");
  if (want == "auto") return d.weight_dtype;
  if (want == "f32") return LLMK_DTYPE_F32;
  if (want == "bf16") return LLMK_DTYPE_BF16;
  if (want == "f16") return LLMK_DTYPE_F16;
  throw Error(LLMK_ERR_INVALID_ARGUMENT,
              layer_name(d) + ": option dtype is \"" + want + "\", expected auto, f32, bf16 or f16");
}

// The weight [out, in] in `dtype`, converted on the host.
std::vector<uint8_t> host_weight(const llmk_linear_desc& d, uint32_t dtype) {
  const size_t n = static_cast<size_t>(d.out_features) * d.in_features;
  std::vector<uint8_t> out(n * dtype_bytes(dtype));
  if (dtype == d.weight_dtype) {
    std::memcpy(out.data(), d.weight, out.size());
    return out;
  }
  std::vector<float> f32(n);
  const auto* half = static_cast<const uint16_t*>(d.weight);
  for (size_t i = 0; i < n; ++i)
    f32[i] = d.weight_dtype == LLMK_DTYPE_F32  ? static_cast<const float*>(d.weight)[i]
             : d.weight_dtype == LLMK_DTYPE_BF16 ? kernels::cpu::bf16_to_f32(half[i])
                                                 : kernels::cpu::f16_to_f32(half[i]);
  auto* dst16 = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < n; ++i) {
    if (dtype == LLMK_DTYPE_F32) std::memcpy(out.data() + 4 * i, &f32[i], 4);
    else dst16[i] = dtype == LLMK_DTYPE_BF16 ? kernels::cpu::f32_to_bf16(f32[i]) : kernels::cpu::f32_to_f16(f32[i]);
  }
  return out;
}

}  // namespace

class LinearCublas {
 public:
  static constexpr const char* kName = "linear.cublas";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA y = x W^T through cuBLASLt (F32, BF16 or F16 weights, F32 accumulation)";
  static constexpr const char* kCapabilities =
      R"({"devices":["cuda"],"weight_dtypes":["f32","f16","bf16"],"activation_dtypes":["f32","f16","bf16"],"options":{"dtype":["auto","f32","bf16","f16"]}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (d.device != LLMK_DEVICE_CUDA) {
      why = "device " + std::to_string(d.device) + " is not CUDA";
      return false;
    }
    if (d.weight_dtype != LLMK_DTYPE_F32 && !is_16bit(d.weight_dtype)) {
      why = "weight dtype " + std::to_string(d.weight_dtype) + " is not f32, f16 or bf16";
      return false;
    }
    if (d.activation_dtype != LLMK_DTYPE_F32 && !is_16bit(d.activation_dtype)) {
      why = "activation dtype " + std::to_string(d.activation_dtype) + " is not f32, f16 or bf16";
      return false;
    }
    if (d.in_features == 0 || d.out_features == 0) {
      why = "in_features and out_features must be positive";
      return false;
    }
    try {
      const uint32_t storage = storage_dtype(d);
      if (is_16bit(d.activation_dtype) && d.activation_dtype != storage) {
        why = std::string(dtype_text(d.activation_dtype)) + " activations need " + dtype_text(d.activation_dtype) +
              " weights, the layer stores " + dtype_text(storage);
        return false;
      }
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit LinearCublas(const llmk_linear_desc& d)
      : in_(d.in_features), out_(d.out_features), max_rows_(std::max<uint32_t>(1, d.max_rows)),
        activation_(d.activation_dtype), storage_(storage_dtype(d)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": " + why);
    const std::vector<uint8_t> host = host_weight(d, storage_);
    check_cuda(cudaMalloc(&weight_, host.size()), layer_name(d) + ": allocating the weight");
    weight_bytes_ = host.size();
    try {
      check_cuda(cudaMemcpy(weight_, host.data(), host.size(), cudaMemcpyHostToDevice),
                 layer_name(d) + ": uploading the weight");
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

  ~LinearCublas() { release(); }
  LinearCublas(const LinearCublas&) = delete;
  LinearCublas& operator=(const LinearCublas&) = delete;

  // The rounded activations (16-bit weights, F32 activations), then cuBLASLt's own.
  size_t workspace_bytes(uint32_t rows) const { return converted_bytes(rows) + kLtWorkspaceBytes; }

  void forward(const void* x, void* y, uint32_t rows, void* workspace, void* stream_ptr) {
    if (rows == 0) return;
    if (rows > max_rows_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT,
                  std::to_string(rows) + " rows exceed the layer's max_rows " + std::to_string(max_rows_));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    auto* ws = static_cast<unsigned char*>(workspace);
    const void* b = x;
    if (converted_bytes(rows) != 0) {
      const int64_t n = static_cast<int64_t>(rows) * in_;
      check_cuda(storage_ == LLMK_DTYPE_BF16
                     ? cuda::convert_f32_to_bf16(static_cast<const float*>(x), reinterpret_cast<__nv_bfloat16*>(ws),
                                                 n, stream)
                     : cuda::convert_f32_to_f16(static_cast<const float*>(x), reinterpret_cast<__half*>(ws), n,
                                                stream),
                 "rounding the activations");
      b = ws;
    }
    void* lt_workspace = ws + converted_bytes(rows);

    cublasLtMatrixLayoutOpaque_t a_layout, b_layout, d_layout;
    const cudaDataType in_type = cuda_type(storage_), out_type = cuda_type(activation_);
    check_lt(cublasLtMatrixLayoutInit(&a_layout, in_type, in_, out_, in_), "the weight's layout");
    check_lt(cublasLtMatrixLayoutInit(&b_layout, in_type, in_, rows, in_), "the activations' layout");
    check_lt(cublasLtMatrixLayoutInit(&d_layout, out_type, out_, rows, out_), "the output's layout");
    const cublasLtMatmulAlgo_t& algo = algorithm(rows, &a_layout, &b_layout, &d_layout);
    const float alpha = 1.0f, beta = 0.0f;
    check_lt(cublasLtMatmul(handle_, desc_, &alpha, weight_, &a_layout, b, &b_layout, &beta, y, &d_layout, y,
                            &d_layout, &algo, lt_workspace, kLtWorkspaceBytes, stream),
             "cublasLtMatmul");
  }

  size_t weight_bytes() const { return weight_bytes_; }

 private:
  size_t converted_bytes(uint32_t rows) const {
    return activation_ == LLMK_DTYPE_F32 && is_16bit(storage_) ? align_up(static_cast<size_t>(rows) * in_ * 2) : 0;
  }

  // The heuristic's first choice for this row count, asked once.
  const cublasLtMatmulAlgo_t& algorithm(uint32_t rows, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                        cublasLtMatrixLayout_t d) {
    const auto found = algos_.find(rows);
    if (found != algos_.end()) return found->second;
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a, b, d, d, preference_, 1, &result, &count),
             "cublasLtMatmulAlgoGetHeuristic");
    if (count == 0)
      throw Error(LLMK_ERR_UNSUPPORTED, "cuBLASLt offers no algorithm for " + std::to_string(rows) + " x " +
                                            std::to_string(in_) + " x " + std::to_string(out_) + " in " +
                                            dtype_text(storage_));
    return algos_.emplace(rows, result.algo).first->second;
  }

  void release() noexcept {
    if (preference_ != nullptr) cublasLtMatmulPreferenceDestroy(preference_);
    if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    if (weight_ != nullptr) cudaFree(weight_);
    preference_ = nullptr;
    desc_ = nullptr;
    handle_ = nullptr;
    weight_ = nullptr;
  }

  uint32_t in_, out_, max_rows_;
  uint32_t activation_, storage_;
  void* weight_ = nullptr;  // [out, in] in storage_, device memory
  size_t weight_bytes_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
  std::map<uint32_t, cublasLtMatmulAlgo_t> algos_;  // by row count
};

}  // namespace llmk::linear_cublas

LLMK_EXPORT_LINEAR_PLUGIN(llmk::linear_cublas::LinearCublas)
