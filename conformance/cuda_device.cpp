// The CUDA runtime side of Device. The same source builds against the real
// runtime (linked into llmk where the build has CUDA) and against the CUDA
// simulation (linked into llmk-conformance-sim).
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "conformance/device.hpp"

namespace llmk::conformance {
namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(status));
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(std::string description) : description_(std::move(description)) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
      throw std::runtime_error(std::string("no CUDA device (cudaGetDeviceCount: ") +
                               (status == cudaSuccess ? "0 devices" : cudaGetErrorString(status)) + ")");
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  ~CudaDevice() override { cudaStreamDestroy(stream_); }
  uint32_t device() const override { return 1; }  // LLMK_DEVICE_CUDA
  std::string description() const override { return description_; }
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    check(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    return ptr;
  }
  size_t alignment() const override { return 256; }
  void release(void* ptr) noexcept override { cudaFree(ptr); }
  void copy_in(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  void copy_out(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
  }
  void* stream() override { return stream_; }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "the plugin's work on the stream"); }

 private:
  std::string description_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(const std::string& description) {
  return std::make_unique<CudaDevice>(description);
}

}  // namespace llmk::conformance
