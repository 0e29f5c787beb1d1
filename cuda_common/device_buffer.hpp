// Memory owned through the CUDA runtime: device memory (cudaMalloc) or pinned
// host memory (cudaMallocHost), freed with the object. The one buffer type of
// the CUDA executor, its sampler and the CUDA plugins.
//
// Header-only host code over <cuda_runtime.h>: it builds against the CUDA
// toolkit and against the CUDA simulation (cudasim/) alike. It reports the
// runtime's status rather than throwing, so that each layer turns a failure
// into its own error (core: llmk::Error, plugins: plugin::Error).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace llmk::cuda {

enum class MemoryKind { device, pinned_host };

template <MemoryKind kind>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Replaces the contents with `bytes` of new memory (none, and a null
  // pointer, for 0). On failure the buffer is empty.
  cudaError_t allocate(size_t bytes) {
    reset();
    if (bytes == 0) return cudaSuccess;
    const cudaError_t status = kind == MemoryKind::device ? cudaMalloc(&data_, bytes) : cudaMallocHost(&data_, bytes);
    if (status != cudaSuccess) {
      data_ = nullptr;
      return status;
    }
    bytes_ = bytes;
    return cudaSuccess;
  }

  // At least `bytes`, reallocating (contents lost) only when it holds fewer.
  cudaError_t reserve(size_t bytes) { return bytes > bytes_ ? allocate(bytes) : cudaSuccess; }

  // Frees the memory. Freeing device memory waits for the device to finish
  // with it (cudaFree synchronizes).
  void reset() noexcept {
    if (data_ != nullptr) {
      if constexpr (kind == MemoryKind::device)
        cudaFree(data_);
      else
        cudaFreeHost(data_);
    }
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  float* f32() const { return as<float>(); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<MemoryKind::device>;
using PinnedBuffer = Buffer<MemoryKind::pinned_host>;

// `out` becomes a device copy of `bytes` of host memory (empty for 0).
inline cudaError_t upload(const void* host, size_t bytes, DeviceBuffer& out) {
  if (const cudaError_t status = out.allocate(bytes); status != cudaSuccess || bytes == 0) return status;
  const cudaError_t status = cudaMemcpy(out.data(), host, bytes, cudaMemcpyHostToDevice);
  if (status != cudaSuccess) out.reset();
  return status;
}

}  // namespace llmk::cuda
