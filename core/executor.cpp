#include "core/executor.hpp"

#include <cstring>
#include <map>
#include <mutex>

#include "core/cpu_executor.hpp"
#include "core/cpu_sampler.hpp"
#include "core/device_registry.hpp"
#include "core/device_sampler.hpp"
#include "core/error.hpp"
#include "core/parallel_executor.hpp"

namespace llmk {

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::map<Device, DeviceBackend>& backends() {
  static std::map<Device, DeviceBackend> table{
      {Device::cpu, DeviceBackend{&make_cpu_executor, &make_cpu_sampler, &make_cpu_shard_executor}},
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

void DeviceSampler::truncate_history(uint64_t request_key, int32_t sample_index, int32_t /*num_generated*/) {
  throw Error(ErrorCode::internal, "this device's sampler cannot drop speculated ids (request " +
                                       std::to_string(request_key) + " sample " + std::to_string(sample_index) + ")");
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

void Executor::copy_ids_to_host(const SampledIds& ids, int32_t* out) {
  if (ids.device != Device::cpu)
    throw Error(ErrorCode::invalid_argument, std::string("ids copy: ids in ") + device_name(ids.device) +
                                                 " memory for the " + device_name(device()) + " executor");
  if (ids.count > 0) std::memcpy(out, ids.data, static_cast<size_t>(ids.count) * sizeof(int32_t));
}

std::optional<LogitsView> Executor::start_step(const StepBatch& /*batch*/) {
  throw Error(ErrorCode::internal, "start_step: the " + describe() + " executor runs one step at a time (execute)");
}

LogitsView Executor::finish_oldest() {
  throw Error(ErrorCode::internal, "finish_oldest: the " + describe() + " executor runs one step at a time (execute)");
}

std::unique_ptr<Executor> make_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                        PluginRegistry& plugins) {
  const std::string& name = cfg.executor.device;
  const std::optional<Device> device = device_from_name(name);
  // A device this build does not compile is still served where the program
  // registered an executor for it itself (the CUDA simulation's tests do, in
  // a build without nvcc).
  if (!device || (!has_executor(name) && device_backend(*device).make_executor == nullptr))
    throw Error(ErrorCode::invalid_config, "executor.device: '" + name + "' has no executor in this build (built: " +
                                               built_executor_device_names() + ")");
  if (static_cast<uint64_t>(cfg.parallel.tensor) * cfg.parallel.pipeline > 1) {
    // Rank 0 of a parallel job (the other ranks run serve_parallel_steps).
    std::shared_ptr<ParallelJob> job = ParallelJob::join(cfg, plugins);
    if (job->rank() != 0)
      throw Error(ErrorCode::internal, "make_executor on " + job->describe() +
                                           ": ranks other than 0 serve rank 0's steps (serve_parallel_steps)");
    std::unique_ptr<Executor> local = make_shard_executor(cfg, std::move(checkpoint), plugins, job);
    return std::make_unique<ParallelExecutor>(std::move(local), std::move(job), cfg.parallel.timeout_s);
  }
  const ExecutorFactory factory = device_backend(*device).make_executor;
  if (factory == nullptr)
    throw Error(ErrorCode::internal, "executor.device: this build has a '" + name +
                                         "' executor, but this program did not register it "
                                         "(register_built_executors() in actors/built_executors.hpp)");
  return factory(cfg, std::move(checkpoint), plugins);
}

std::unique_ptr<Executor> make_shard_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                              PluginRegistry& plugins, std::shared_ptr<ParallelJob> job) {
  const std::string& name = cfg.executor.device;
  const std::optional<Device> device = device_from_name(name);
  const ShardExecutorFactory factory = device ? device_backend(*device).make_shard_executor : nullptr;
  if (factory == nullptr)
    throw Error(ErrorCode::unsupported, "parallel.tensor and parallel.pipeline: the " + name +
                                            " executor has no tensor or pipeline parallelism in this build");
  return factory(cfg, std::move(checkpoint), plugins, std::move(job));
}

}  // namespace llmk
