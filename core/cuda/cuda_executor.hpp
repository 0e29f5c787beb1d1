// The CUDA executor: the Llama forward on one CUDA device, behind the
// Executor seam (core/executor.hpp).
//
//   weights      linear layers from the configured linear plugin on the
//                device (linear.cublas), norms and biases in f32, the
//                embedding table in the checkpoint's dtype
//   KV memory    every layer's arrays as the attention plugin declares them,
//                in device memory, sized in tokens, bytes, or a fraction of
//                the memory left free after the weights
//   activations  device buffers for max_step_tokens rows, allocated once
//   queue        one stream; execute() enqueues the whole step and records
//                an event after the lm_head, which the LogitsView carries
//
// This file names no CUDA type, so programs include it without the
// toolkit. The same source builds against the CUDA runtime (llmk_cuda) and
// against the CUDA simulation (tests/cudasim), where it runs in CI.
#pragma once

#include <memory>

#include "core/executor.hpp"

namespace llmk {

// Throws Error(unsupported) naming the reason when no CUDA device can be
// used ("no CUDA device is visible: cudaErrorNoDevice ..."), besides what
// any executor's construction throws. The checkpoint must outlive it.
std::unique_ptr<Executor> make_cuda_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                             PluginRegistry& plugins);

// Decode steps a CUDA executor replayed from graphs, and graphs it holds
// (zeros for another executor). For tests and logs.
struct CudaGraphStats {
  size_t replays = 0;
  size_t graphs = 0;
};
CudaGraphStats cuda_graph_stats(const Executor& executor);

}  // namespace llmk
