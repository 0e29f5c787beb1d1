#include "core/executor.hpp"

#include "core/cpu_executor.hpp"
#include "core/error.hpp"

namespace llmk {

const char* device_name(Device device) noexcept {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  return "unknown";
}

const std::vector<Device>& built_executor_devices() {
  // A CUDA executor adds Device::cuda here, under the build flag that compiles it.
  static const std::vector<Device> devices{Device::cpu};
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

std::unique_ptr<Executor> make_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                        PluginRegistry& plugins) {
  const std::string& device = cfg.executor.device;
  if (!has_executor(device))
    throw Error(ErrorCode::invalid_config, "executor.device: '" + device + "' has no executor in this build (built: " +
                                               built_executor_device_names() + ")");
  // Only the CPU is built today; each device's branch goes here.
  return std::make_unique<CpuExecutor>(cfg, std::move(checkpoint), plugins);
}

}  // namespace llmk
