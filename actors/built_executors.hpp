// Registers every device executor this build compiled besides the CPU's
// (core/executor.hpp: register_executor), with its sampler
// (core/device_sampler.hpp), so that make_executor can build them. The Engine calls it; programs that call make_executor themselves
// call it first. Idempotent.
#pragma once

namespace llmk {

void register_built_executors();

}  // namespace llmk
