// Shared host-side pieces of the quantized CUDA linear plugins
// (linear.cuda_int8, linear.cuda_int4, linear.cuda_fp8): the desc checks they
// have in common, options, the checkpoint weight as f32, status checks that
// throw plugin errors, and device arrays owned by a layer. Header-only; this
// folder is not a plugin itself. Host code only: it builds against the CUDA
// toolkit and against the CUDA simulation alike.
#pragma once

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "plugins/api/plugin_helpers.hpp"

namespace llmk::cuda_quant {

using plugin::Error;

constexpr size_t kAlign = 256;  // every workspace region starts on 256 bytes

inline size_t align_up(size_t n, size_t to = kAlign) { return (n + to - 1) / to * to; }

inline std::string layer_name(const llmk_linear_desc& d) { return d.name != nullptr ? d.name : "(unnamed layer)"; }

inline void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw Error(LLMK_ERR_INTERNAL, what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// What every quantized CUDA layer needs of its desc: a CUDA device, F32
// activations (the executor's), an F32/F16/BF16 checkpoint weight, a shape.
inline bool check_cuda_desc(const llmk_linear_desc& d, std::string& why) {
  if (d.device != LLMK_DEVICE_CUDA) {
    why = "device " + std::to_string(d.device) + " is not CUDA";
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

inline nlohmann::json parse_options(const llmk_linear_desc& d) {
  const char* text = d.options != nullptr && d.options[0] != '\0' ? d.options : "{}";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": plugin options are not a JSON object: " + text);
  return j;
}

// Rejects option keys outside `known`, naming the first unknown one.
inline void check_option_keys(const nlohmann::json& options, const std::vector<std::string>& known,
                              const llmk_linear_desc& d) {
  for (const auto& item : options.items()) {
    bool ok = false;
    for (const auto& k : known) ok = ok || item.key() == k;
    if (ok) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error(LLMK_ERR_INVALID_ARGUMENT,
                layer_name(d) + ": unknown plugin option \"" + item.key() + "\" (known: " + list + ")");
  }
}

// A string option that must be one of `allowed`; `fallback` when absent.
inline std::string choice_option(const nlohmann::json& options, const char* key, const std::string& fallback,
                                 const std::vector<std::string>& allowed, const llmk_linear_desc& d) {
  if (!options.contains(key)) return fallback;
  const auto& v = options[key];
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  if (v.is_string())
    for (const auto& a : allowed)
      if (v.get<std::string>() == a) return a;
  throw Error(LLMK_ERR_INVALID_ARGUMENT,
              layer_name(d) + ": option " + key + " is " + v.dump() + ", expected one of " + list);
}

// The checkpoint weight [out_features, in_features] as f32 (a host copy).
inline std::vector<float> weight_as_f32(const llmk_linear_desc& d) {
  const size_t n = static_cast<size_t>(d.out_features) * d.in_features;
  std::vector<float> w(n);
  const auto* half = static_cast<const uint16_t*>(d.weight);
  for (size_t i = 0; i < n; ++i)
    w[i] = d.weight_dtype == LLMK_DTYPE_F32    ? static_cast<const float*>(d.weight)[i]
           : d.weight_dtype == LLMK_DTYPE_BF16 ? kernels::cpu::bf16_to_f32(half[i])
                                               : kernels::cpu::f16_to_f32(half[i]);
  return w;
}

// Device memory a layer owns, uploaded once from the host.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const void* host, size_t bytes, const std::string& what) : bytes_(bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "allocating " + what);
    const cudaError_t status = cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice);
    if (status != cudaSuccess) {
      cudaFree(ptr_);
      ptr_ = nullptr;
      check_cuda(status, "uploading " + what);
    }
  }
  template <class T>
  DeviceArray(const std::vector<T>& host, const std::string& what)
      : DeviceArray(host.data(), host.size() * sizeof(T), what) {}
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace llmk::cuda_quant
