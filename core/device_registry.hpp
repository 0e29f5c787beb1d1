// The registry of device backends: per device, the factory of its Executor
// and of its DeviceSampler. make_executor (core/executor.hpp) and
// make_device_sampler read it, for the CPU as for any other device.
//
// The CPU's backend is in the table from the start (its code is llmk_core's).
// A device whose code lives in a library of its own is registered by the
// program that links it, before make_executor runs:
// register_built_executors() (actors/built_executors.hpp) does it for every
// backend the build compiled. Registering a device again replaces its entry.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device.hpp"

namespace llmk {

class Checkpoint;
class DeviceSampler;
class Executor;
class ParallelJob;
class PluginRegistry;
struct EngineConfig;

using ExecutorFactory = std::unique_ptr<Executor> (*)(const EngineConfig& cfg,
                                                      std::shared_ptr<const Checkpoint> checkpoint,
                                                      PluginRegistry& plugins);
// An executor of this rank's share of the model in a parallel job
// (core/parallel.hpp): the same contract, over the job's communicators.
using ShardExecutorFactory = std::unique_ptr<Executor> (*)(const EngineConfig& cfg,
                                                           std::shared_ptr<const Checkpoint> checkpoint,
                                                           PluginRegistry& plugins, std::shared_ptr<ParallelJob> job);
// vocab_size: the columns of each logits row the sampler may pick from.
using DeviceSamplerFactory = std::unique_ptr<DeviceSampler> (*)(int32_t vocab_size);

struct DeviceBackend {
  ExecutorFactory make_executor = nullptr;
  DeviceSamplerFactory make_sampler = nullptr;
  ShardExecutorFactory make_shard_executor = nullptr;  // null: the device has no tensor or pipeline parallelism
};

void register_device_backend(Device device, DeviceBackend backend);
// The device's entry; an entry with null factories when nothing registered it.
DeviceBackend device_backend(Device device);

}  // namespace llmk
