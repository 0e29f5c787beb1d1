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

// This rank's share of the model in a parallel job (core/parallel.hpp), for
// the device registry's make_shard_executor: tensor parallelism only (a
// parallel.pipeline above 1 is refused, Error(unsupported)). Overlapped
// steps' ids reach rank 0's host before it announces the step
// (copy_ids_to_host). The tensor group's exchanges run on the job's device
// communicator (parallel.comm=comm.nccl) on the executor's stream, or over
// the host one (comm.mpi) with host copies and no CUDA graphs.
std::unique_ptr<Executor> make_cuda_shard_executor(const EngineConfig& cfg,
                                                   std::shared_ptr<const Checkpoint> checkpoint,
                                                   PluginRegistry& plugins, std::shared_ptr<ParallelJob> job);

// Decode steps a CUDA executor replayed from graphs, and graphs it holds
// (zeros for another executor). For tests and logs.
struct CudaGraphStats {
  size_t replays = 0;
  size_t graphs = 0;
};
CudaGraphStats cuda_graph_stats(const Executor& executor);

}  // namespace llmk
