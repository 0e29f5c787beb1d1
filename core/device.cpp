#include "core/device.hpp"

namespace llmk {

const char* device_name(Device device) noexcept {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  return "unknown";
}

std::optional<Device> device_from_name(std::string_view name) noexcept {
  for (Device d : {Device::cpu, Device::cuda})
    if (name == device_name(d)) return d;
  return std::nullopt;
}

const std::vector<Device>& built_executor_devices() {
  // LLMK_HAVE_CUDA is defined for llmk_core when the build compiles the CUDA
  // executor, though that executor lives in llmk_cuda.
#if defined(LLMK_HAVE_CUDA) && LLMK_HAVE_CUDA
  static const std::vector<Device> devices{Device::cpu, Device::cuda};
#else
  static const std::vector<Device> devices{Device::cpu};
#endif
  return devices;
}

std::string built_executor_device_names() {
  std::string out;
  for (Device d : built_executor_devices()) out += (out.empty() ? "" : ", ") + std::string(device_name(d));
  return out;
}

bool has_executor(std::string_view name) {
  for (Device d : built_executor_devices())
    if (name == device_name(d)) return true;
  return false;
}

}  // namespace llmk
