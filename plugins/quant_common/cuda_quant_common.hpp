// Shared host-side pieces of the CUDA linear plugins (linear.cublas,
// linear.cuda_int8, linear.cuda_int4, linear.cuda_fp8): the desc checks they
// have in common, options, the checkpoint weight as f32, status checks that
// throw plugin errors, and uploads of the device arrays a layer owns.
// Header-only; this folder is not a plugin itself. Host code only: it builds
// against the CUDA toolkit and against the CUDA simulation alike.
#pragma once

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_common/device_buffer.hpp"
#include "kernels/cpu/convert.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/quant_common/linear_options.hpp"

namespace llmk::cuda_quant {

using plugin::Error;
using linear_options::check_option_keys;
using linear_options::choice_option;
using linear_options::layer_name;
using linear_options::parse_options;
using linear_options::weight_as_f32;

constexpr size_t kAlign = 256;  // every workspace region starts on 256 bytes

inline size_t align_up(size_t n, size_t to = kAlign) { return (n + to - 1) / to * to; }

inline void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw Error(LLMK_ERR_INTERNAL, what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// What every quantized CUDA layer needs of its desc: a CUDA device, F32
// activations (the executor's), an F32/F16/BF16 checkpoint weight, a shape.
inline bool check_cuda_desc(const llmk_linear_desc& d, std::string& why) {
  if (d.device != LLMK_DEVICE_CUDA) {
    why = "this plugin runs on CUDA, the desc names " + plugin::device_text(d.device);
    return false;
  }
  if (d.activation_dtype != LLMK_DTYPE_F32) {
    why = "activation dtype " + std::to_string(d.activation_dtype) + " is not f32";
    return false;
  }
  if (d.weight_dtype != LLMK_DTYPE_F32 && d.weight_dtype != LLMK_DTYPE_F16 && d.weight_dtype != LLMK_DTYPE_BF16) {
    why = "weight dtype " + std::to_string(d.weight_dtype) + " is not f32, f16 or bf16";
    return false;
  }
  if (d.in_features == 0 || d.out_features == 0) {
    why = "in_features and out_features must be positive";
    return false;
  }
  return true;
}

// Device memory a layer owns (cuda_common/device_buffer.hpp), uploaded once
// from the host.
using cuda::DeviceBuffer;

inline DeviceBuffer upload_array(const void* host, size_t bytes, const std::string& what) {
  DeviceBuffer d;
  check_cuda(d.allocate(bytes), "allocating " + what);
  if (bytes != 0) check_cuda(cudaMemcpy(d.data(), host, bytes, cudaMemcpyHostToDevice), "uploading " + what);
  return d;
}

template <class T>
DeviceBuffer upload_array(const std::vector<T>& host, const std::string& what) {
  return upload_array(host.data(), host.size() * sizeof(T), what);
}

}  // namespace llmk::cuda_quant
