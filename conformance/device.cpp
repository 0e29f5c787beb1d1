#include "conformance/device.hpp"

#include <cstring>
#include <new>

namespace llmk::conformance {
namespace {

class CpuDevice final : public Device {
 public:
  uint32_t device() const override { return 0; }  // LLMK_DEVICE_CPU
  std::string description() const override { return "cpu"; }
  void* allocate(size_t bytes) override { return ::operator new(bytes, std::align_val_t{64}); }
  size_t alignment() const override { return 64; }
  void release(void* ptr) noexcept override { ::operator delete(ptr, std::align_val_t{64}); }
  void copy_in(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_out(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace llmk::conformance
