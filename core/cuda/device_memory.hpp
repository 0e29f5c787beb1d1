// Status checks and buffers for the CUDA executor and sampler: a failing
// runtime call becomes Error(internal) naming the component, the operation
// and the runtime's error ("CUDA executor: the KV cache: cudaErrorMemory...").
// The buffers are cuda_common/device_buffer.hpp's, which CUDA plugins share.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda_common/device_buffer.hpp"

namespace llmk {

// Throws Error(internal) "<component>: <what>: <error name> (<error text>)".
[[noreturn]] inline void cuda_failed(const char* component, cudaError_t status, const std::string& what) {
  throw Error(ErrorCode::internal, std::string(component) + ": " + what + ": " + cudaGetErrorName(status) + " (" +
                                       cudaGetErrorString(status) + ")");
}

// The executor's check (its files report as "CUDA executor").
inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) cuda_failed("CUDA executor", status, what);
}

// `bytes` of device memory (none for 0) for `what`.
inline cuda::DeviceBuffer device_buffer(size_t bytes, const char* what) {
  cuda::DeviceBuffer d;
  if (const cudaError_t status = d.allocate(bytes); status != cudaSuccess)
    cuda_failed("CUDA executor", status, "allocating " + std::to_string(bytes) + " bytes for " + what);
  return d;
}

inline cuda::PinnedBuffer pinned_buffer(size_t bytes) {
  cuda::PinnedBuffer p;
  check_cuda(p.allocate(bytes), "allocating pinned host memory");
  return p;
}

// A device copy of `bytes` of host memory.
inline cuda::DeviceBuffer upload(const void* host, size_t bytes, const char* what) {
  cuda::DeviceBuffer d = device_buffer(bytes, what);
  if (bytes != 0) check_cuda(cudaMemcpy(d.data(), host, bytes, cudaMemcpyHostToDevice), what);
  return d;
}

inline cuda::DeviceBuffer upload(const std::vector<float>& host, const char* what) {
  return upload(host.data(), host.size() * sizeof(float), what);
}

}  // namespace llmk
