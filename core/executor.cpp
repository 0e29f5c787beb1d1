#include "core/executor.hpp"

#include <cstring>
#include <map>
#include <mutex>

#include "core/cpu_executor.hpp"
#include "core/device_sampler.hpp"
#include "core/error.hpp"

namespace llmk {

const char* device_name(Device device) noexcept {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  return "unknown";
}

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<Device, ExecutorFactory>& factories() {
  static std::map<Device, ExecutorFactory> f;
  return f;
}

std::map<Device, DeviceSamplerFactory>& sampler_factories() {
  static std::map<Device, DeviceSamplerFactory> f;
  return f;
}

}  // namespace

const std::vector<Device>& built_executor_devices() {
  // The CPU always; CUDA when the build compiled its executor (LLMK_HAVE_CUDA
  // is defined for llmk_core then, though the executor itself lives in
  // llmk_cuda and is registered by the program).
#if defined(LLMK_HAVE_CUDA) && LLMK_HAVE_CUDA
  static const std::vector<Device> devices{Device::cpu, Device::cuda};
#else
  static const std::vector<Device> devices{Device::cpu};
#endif
  return devices;
}

void register_executor(Device device, ExecutorFactory factory) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  factories()[device] = factory;
}

void register_device_sampler(Device device, DeviceSamplerFactory factory) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  sampler_factories()[device] = factory;
}

std::unique_ptr<DeviceSampler> make_device_sampler(Device device, int32_t vocab_size) {
  DeviceSamplerFactory factory = nullptr;
  {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    const auto it = sampler_factories().find(device);
    if (it != sampler_factories().end()) factory = it->second;
  }
  if (factory == nullptr)
    throw Error(ErrorCode::internal, std::string("no sampler is registered for device '") + device_name(device) +
                                         "' (register_built_executors() in actors/built_executors.hpp)");
  return factory(vocab_size);
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

void validate_fed_back(const StepBatch& batch, const SampledIds& previous, Device device) {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "step batch: " + what); };
  const int32_t n = batch.num_tokens();
  for (const FedBackToken& f : batch.fed_back)
    if (f.row < 0 || f.row >= n || f.previous_row < 0)
      bad("fed-back token row " + std::to_string(f.row) + " (from the previous step's logits row " +
          std::to_string(f.previous_row) + ") outside [0, " + std::to_string(n) + ")");
  if (batch.fed_back.empty() || previous.failed) return;
  if (previous.data == nullptr)
    bad(std::to_string(batch.fed_back.size()) + " fed-back rows, but no ids of a previous step");
  if (previous.device != device)
    bad(std::string("fed-back ids in ") + device_name(previous.device) + " memory for the " + device_name(device) +
        " executor");
  for (const FedBackToken& f : batch.fed_back)
    if (f.previous_row >= previous.count)
      bad("fed-back token from logits row " + std::to_string(f.previous_row) + ", but the previous step sampled " +
          std::to_string(previous.count));
}

void validate_logits_copy(const LogitsView& view, int32_t first_row, int32_t num_rows, Device device) {
  if (view.device != device)
    throw Error(ErrorCode::invalid_argument, std::string("logits copy: a view in ") + device_name(view.device) +
                                                 " memory given to the " + device_name(device) + " executor");
  if (first_row < 0 || num_rows < 0 || first_row + num_rows > view.num_rows)
    throw Error(ErrorCode::invalid_argument, "logits copy: rows [" + std::to_string(first_row) + ", " +
                                                 std::to_string(first_row + num_rows) + ") outside a view of " +
                                                 std::to_string(view.num_rows));
}

void Executor::copy_logits_to_host(const LogitsView& view, int32_t first_row, int32_t num_rows, float* out) {
  validate_logits_copy(view, first_row, num_rows, device());
  if (view.device != Device::cpu)
    throw Error(ErrorCode::internal,
                std::string("logits copy: the ") + device_name(view.device) + " executor does not copy to the host");
  const size_t row_bytes = static_cast<size_t>(view.vocab_size) * sizeof(float);
  for (int32_t r = 0; r < num_rows; ++r)
    std::memcpy(out + static_cast<size_t>(r) * view.vocab_size, view.row(first_row + r), row_bytes);
}

std::unique_ptr<Executor> make_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                        PluginRegistry& plugins) {
  const std::string& device = cfg.executor.device;
  if (!has_executor(device))
    throw Error(ErrorCode::invalid_config, "executor.device: '" + device + "' has no executor in this build (built: " +
                                               built_executor_device_names() + ")");
  if (device == device_name(Device::cpu)) return std::make_unique<CpuExecutor>(cfg, std::move(checkpoint), plugins);
  ExecutorFactory factory = nullptr;
  {
    const std::lock_guard<std::mutex> lock(registry_mutex());
    for (const auto& [d, f] : factories())
      if (device == device_name(d)) factory = f;
  }
  if (factory == nullptr)
    throw Error(ErrorCode::internal, "executor.device: this build has a '" + device +
                                         "' executor, but this program did not register it "
                                         "(register_built_executors() in actors/built_executors.hpp)");
  return factory(cfg, std::move(checkpoint), plugins);
}

}  // namespace llmk
