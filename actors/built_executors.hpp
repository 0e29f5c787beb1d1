// Registers the backend (executor and sampler) of every device this build
// compiled in a library of its own (core/device_registry.hpp; the CPU's is
// there already), so that make_executor and make_device_sampler can build
// them. The Engine calls it; programs that call make_executor themselves
// call it first. Idempotent.
#pragma once

namespace llmk {

void register_built_executors();

}  // namespace llmk
