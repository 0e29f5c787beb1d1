// The Llama forward on a CUDA device, enqueued on one stream. The order of
// operations is the CPU executor's (core/model.cpp), op for op:
//   embedding -> per layer: [residual add +] rmsnorm -> qkv (linear plugin)
//   [+ bias] -> rope -> split q/k/v -> attention plugin (writes K/V, attends)
//   -> o_proj -> residual add + rmsnorm -> gate_up -> silu*up -> down
//   -> final residual add + rmsnorm -> lm_head on the logits rows only.
// The last layer's o_proj and MLP run on the logits rows only, as on the CPU.
// A tensor-parallel rank all-reduces the embedding and the outputs of o_proj
// and down_proj, and gathers the logits at rank 0, as core/model.cpp does.
// Nothing here waits for the device, allocates, or plans: the step's
// attention plan and metadata upload come first (core/cuda/cuda_executor.cpp),
// so that the same calls can be captured into a CUDA graph.
//
// StreamingLLM (kv_cache.window, sink_tokens), as core/model.cpp does it:
// keys and queries are rotated by their text positions (which may pass the
// rotary tables: those rows' angles are computed from the frequencies), and
// with sinks every query row is also rotated by its cache position into
// q_sink, which the attention plugin scores the sinks with. Unlike the CPU,
// which rotates q_sink only in steps where some row is shifted, q_sink is
// rotated in every step (a row not shifted gets q's bits), so the forward's
// calls, and a captured graph's, do not depend on the step's positions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "core/cuda/cuda_kv_memory.hpp"
#include "core/cuda/cuda_tensor_parallel.hpp"
#include "core/cuda/cuda_weights.hpp"
#include "core/cuda/device_memory.hpp"
#include "core/cuda/step_metadata.hpp"
#include "core/model_config.hpp"
#include "core/model_runtime.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace llmk {

// Device buffers for max_step_tokens rows, allocated once, and the rotary
// tables.
struct CudaActivations {
  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;
  cuda::DeviceBuffer hidden, x_norm, proj;  // [rows, hidden]
  cuda::DeviceBuffer qkv;                   // [rows, qkv_dim]
  cuda::DeviceBuffer q, attn;               // [rows, q_dim]
  cuda::DeviceBuffer k, v;                  // [rows, kv_dim]
  cuda::DeviceBuffer gate_up;               // [rows, 2 * intermediate]
  cuda::DeviceBuffer act;                   // [rows, intermediate]
  cuda::DeviceBuffer rope_cos, rope_sin;    // [max_seq_len, head_dim / 2]
  cuda::DeviceBuffer q_sink;                // [rows, q_dim]: with attention sinks, q rotated by its cache position
  cuda::DeviceBuffer inv_freq;              // [head_dim / 2] double: with a streaming window, positions past the tables
  std::shared_ptr<cuda::DeviceBuffer> logits;  // [max_step_tokens, vocab]; shared with the views handed out

  CudaActivations() = default;
  // window, sink_tokens: kv_cache.window and kv_cache.sink_tokens (0: no streaming window).
  CudaActivations(const ModelConfig& model, const ModelRuntime& rt, uint32_t window = 0, uint32_t sink_tokens = 0);
};

// What one forward reads and writes.
struct CudaForward {
  const ModelConfig& model;
  const ModelRuntime& rt;
  CudaWeights& weights;
  const CudaKvMemory& kv;
  AttentionImpl& attention;  // planned for this step
  const cuda::DeviceBuffer& attention_workspace;
  CudaActivations& act;
  cudaStream_t stream;
  // Tensor parallelism: the model above is this rank's share
  // (local_model_config), the step's token ids are rows of its embedding
  // table (CudaTensorParallel::local_ids), and the partial sums are
  // all-reduced here. Null at degree 1.
  CudaTensorParallel* tensor_parallel = nullptr;
};

// Enqueues the forward of step `b`, whose arrays `m` holds on the device,
// leaving its logits rows in act.logits.
void enqueue_forward(const CudaForward& f, const StepBatch& b, const MetaBuffers& m);

}  // namespace llmk
