// The devices llmk runs models on, and the one registry of their backends.
//
// A device backend is the pair that works where its logits live: an
// Executor (core/executor.hpp) and a DeviceSampler (core/device_sampler.hpp).
// Every device, the CPU included, is looked up in the same table: the CPU's
// entry is there from the start (its code is in llmk_core); a device whose
// code lives in a library of its own (CUDA never enters llmk_core) is
// registered by the program that links it (actors/built_executors.hpp).
//
// This header knows nothing of configs, checkpoints or executors, so that
// config validation can ask which devices are built without a cycle.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

enum class Device : uint8_t { cpu = 0, cuda = 1 };

const char* device_name(Device device) noexcept;  // "cpu", "cuda"
// The device `name` spells ("cpu", "cuda"), or nothing.
std::optional<Device> device_from_name(std::string_view name) noexcept;

// The devices this build has a backend for, in preference order ("cpu"
// always; "cuda" when the build compiled the CUDA executor).
const std::vector<Device>& built_executor_devices();
// The same as text: "cpu" (or "cpu, cuda").
std::string built_executor_device_names();
// True when `name` names a device of built_executor_devices().
bool has_executor(std::string_view name);

}  // namespace llmk
