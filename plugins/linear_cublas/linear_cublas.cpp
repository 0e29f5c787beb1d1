// linear.cublas: y = x W^T on a CUDA device through cuBLASLt.
//
// create() converts the checkpoint's weight on the host to the storage
// dtype (option "dtype": "auto" keeps the checkpoint's, or "f32", "bf16",
// "f16") and uploads it once. forward() enqueues on the caller's stream:
// with 16-bit weights and F32 activations it first rounds x to the weight's
// dtype in the workspace (kernels/cuda/convert.hpp; the capabilities declare
// that rounding as "activation_rounding", which the conformance suite's
// bound allows), then one cuBLASLt matmul with F32 accumulation writes y in
// the activation dtype. The cuBLASLt workspace is carved from the caller's
// workspace too, so a forward allocates no device memory and never
// synchronizes.
//
// Row-major y[rows, out] = x[rows, in] W^T is, read column-major,
// y^T (out x rows) = W (out x in) x^T (in x rows): A is the weight stored
// row-major [out, in] (column-major in x out, ld in) with op T, B is x
// (column-major in x rows, ld in) with op N, D is y (out x rows, ld out).
//
// The product is the shared cuda_quant::LtMatmul (one cuBLASLt handle per
// layer, the heuristic's choice cached per shape), as in the quantized CUDA
// plugins.
//
// The same source builds against the CUDA toolkit (the shipped plugin) and
// against the CUDA simulation (tests/cudasim_plugins).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "kernels/cuda/convert.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/quant_common/cuda_lt_matmul.hpp"
#include "plugins/quant_common/cuda_quant_common.hpp"

namespace llmk::linear_cublas {

namespace {

using cuda_quant::align_up;
using cuda_quant::check_cuda;
using cuda_quant::DeviceBuffer;
using cuda_quant::upload_array;
using cuda_quant::kLtWorkspaceBytes;
using cuda_quant::LtMatmul;
using linear_options::layer_name;
using plugin::Error;

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

// The storage dtype the options ask for; throws naming a bad option.
uint32_t storage_dtype(const llmk_linear_desc& d) {
  const nlohmann::json options = linear_options::parse_options(d);
  linear_options::check_option_keys(options, {"dtype"}, d);
  const std::string want = linear_options::choice_option(options, "dtype", "auto", {"auto", "f32", "bf16", "f16"}, d);
  if (want == "auto") return d.weight_dtype;
  return want == "f32" ? LLMK_DTYPE_F32 : want == "bf16" ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F16;
}

// The weight [out, in] converted on the host to `dtype` (not the checkpoint's).
std::vector<uint8_t> host_weight(const llmk_linear_desc& d, uint32_t dtype) {
  const size_t n = static_cast<size_t>(d.out_features) * d.in_features;
  std::vector<uint8_t> out(n * (dtype == LLMK_DTYPE_F32 ? 4 : 2));
  const std::vector<float> f32 = linear_options::weight_as_f32(d);
  auto* dst16 = reinterpret_cast<uint16_t*>(out.data());
  if (dtype == LLMK_DTYPE_F32) std::memcpy(out.data(), f32.data(), out.size());
  else if (dtype == LLMK_DTYPE_BF16) kernels::cpu::f32_to_bf16(f32.data(), dst16, static_cast<int64_t>(n));
  else kernels::cpu::f32_to_f16(f32.data(), dst16, static_cast<int64_t>(n));
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
      R"({"devices":["cuda"],"weight_dtypes":["f32","f16","bf16"],"activation_dtypes":["f32","f16","bf16"],"activation_rounding":{"f16":"f16","bf16":"bf16"},"options":{"dtype":["auto","f32","bf16","f16"]}})";

  static bool supports(const llmk_linear_desc& d, std::string& why) {
    if (d.device != LLMK_DEVICE_CUDA) {
      why = "this plugin runs on CUDA, the desc names " + plugin::device_text(d.device);
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
    // Stored as the checkpoint stores it: uploaded from the checkpoint's own
    // bytes, with no host copy (a 7B model's 13 GB would be touched twice).
    const size_t bytes = static_cast<size_t>(out_) * in_ * (storage_ == LLMK_DTYPE_F32 ? 4 : 2);
    weight_ = storage_ == d.weight_dtype ? upload_array(d.weight, bytes, layer_name(d) + ": the weight")
                                         : upload_array(host_weight(d, storage_), layer_name(d) + ": the weight");
  }

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

    lt_.run(cuda_type(storage_), weight_.as<void>(), in_, b, in_, y, out_, out_, rows, in_, lt_workspace, stream,
            cuda_type(activation_));
  }

  size_t weight_bytes() const { return weight_.bytes(); }

 private:
  size_t converted_bytes(uint32_t rows) const {
    return activation_ == LLMK_DTYPE_F32 && is_16bit(storage_) ? align_up(static_cast<size_t>(rows) * in_ * 2) : 0;
  }

  uint32_t in_, out_, max_rows_;
  uint32_t activation_, storage_;
  DeviceBuffer weight_;  // [out, in] in storage_
  LtMatmul lt_;         // one cuBLASLt handle per layer: host memory only, no lock to share it
};

}  // namespace llmk::linear_cublas

LLMK_EXPORT_LINEAR_PLUGIN(llmk::linear_cublas::LinearCublas)
