// The CUDA DeviceSampler (core/device_sampler.hpp): samples a CUDA
// LogitsView on the device and brings back only ids and requested logprobs.
// Like the executor, it names no CUDA type and builds against the runtime
// (llmk_cuda) or the simulation (tests/cudasim).
#pragma once

#include <memory>

#include "core/device_sampler.hpp"

namespace llmk {

std::unique_ptr<DeviceSampler> make_cuda_sampler(int32_t vocab_size);

}  // namespace llmk
