#include "core/executor.hpp"

#include <map>
#include <mutex>

#include "core/cpu_executor.hpp"
#include "core/cpu_sampler.hpp"
#include "core/device_registry.hpp"
#include "core/device_sampler.hpp"
#include "core/error.hpp"

namespace llmk {

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<Device, DeviceBackend>& backends() {
  static std::map<Device, DeviceBackend> table{
      {Device::cpu, DeviceBackend{&make_cpu_executor, &make_cpu_sampler}},
  };
  return table;
}

}  // namespace

void register_device_backend(Device device, DeviceBackend backend) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  backends()[device] = backend;
}

DeviceBackend device_backend(Device device) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  const auto it = backends().find(device);
  return it == backends().end() ? DeviceBackend{} : it->second;
}

std::unique_ptr<DeviceSampler> make_device_sampler(Device device, int32_t vocab_size) {
  const DeviceSamplerFactory factory = device_backend(device).make_sampler;
  if (factory == nullptr)
    throw Error(ErrorCode::internal, std::string("no sampler is registered for device '") + device_name(device) +
                                         "' (register_built_executors() in actors/built_executors.hpp)");
  return factory(vocab_size);
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

std::unique_ptr<Executor> make_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                        PluginRegistry& plugins) {
  const std::string& name = cfg.executor.device;
  const std::optional<Device> device = device_from_name(name);
  if (!device || !has_executor(name))
    throw Error(ErrorCode::invalid_config, "executor.device: '" + name + "' has no executor in this build (built: " +
                                               built_executor_device_names() + ")");
  const ExecutorFactory factory = device_backend(*device).make_executor;
  if (factory == nullptr)
    throw Error(ErrorCode::internal, "executor.device: this build has a '" + name +
                                         "' executor, but this program did not register it "
                                         "(register_built_executors() in actors/built_executors.hpp)");
  return factory(cfg, std::move(checkpoint), plugins);
}

}  // namespace llmk
