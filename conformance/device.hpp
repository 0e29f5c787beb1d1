// Where a conformance suite puts the buffers it hands a plugin: host memory
// for CPU plugins, a CUDA device's memory (a real GPU, or the simulated
// device of tests/cudasim) for device plugins. The suites compute their
// references on the host and copy in and out through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmk::conformance {

class Device {
 public:
  virtual ~Device() = default;
  virtual uint32_t device() const = 0;                 // the llmk_device the descs name
  virtual std::string description() const = 0;         // "cpu", "simulated device (no GPU)", ...
  virtual void* allocate(size_t bytes) = 0;            // alignment()-byte aligned; throws std::runtime_error
  virtual size_t alignment() const = 0;                // 64 on the host, 256 from cudaMalloc
  virtual void release(void* ptr) noexcept = 0;
  virtual void copy_in(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_out(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void* stream() = 0;                          // the queue plugins get: nullptr on the CPU
  virtual void synchronize() = 0;                      // waits for the stream; throws with the device's error
};

// Host memory; allocations are exactly the bytes asked for, so a plugin that
// writes past a buffer trips the sanitizers.
std::unique_ptr<Device> make_cpu_device();

// The current CUDA device through the CUDA runtime (conformance/cuda_device.cpp,
// compiled where the build has CUDA or the simulation); throws
// std::runtime_error when there is none. `description` names it in reports.
std::unique_ptr<Device> make_cuda_device(const std::string& description);

// The device a suite runs on: the one its options name, else host memory
// owned here.
class SuiteDevice {
 public:
  explicit SuiteDevice(Device* given)
      : host_(given ? nullptr : make_cpu_device()), device_(given ? given : host_.get()) {}
  Device& operator*() const { return *device_; }
  Device* operator->() const { return device_; }
  Device* get() const { return device_; }

 private:
  std::unique_ptr<Device> host_;
  Device* device_;
};

// One allocation on a Device, freed with it.
class DeviceBuffer {
 public:
  DeviceBuffer(Device& device, size_t bytes) : device_(&device), bytes_(bytes), ptr_(device.allocate(bytes)) {}
  template <class T>
  DeviceBuffer(Device& device, const std::vector<T>& host) : DeviceBuffer(device, host.size() * sizeof(T)) {
    if (bytes_ > 0) device.copy_in(ptr_, host.data(), bytes_);
  }
  ~DeviceBuffer() { device_->release(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  void copy_out(std::vector<T>& host) const {
    if (bytes_ > 0) device_->copy_out(host.data(), ptr_, std::min(bytes_, host.size() * sizeof(T)));
  }

 private:
  Device* device_;
  size_t bytes_;
  void* ptr_;
};

}  // namespace llmk::conformance
