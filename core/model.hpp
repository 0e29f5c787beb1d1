// The Llama forward pass on the CPU as a sequence of kernel and plugin calls,
// over weights (core/model_weights.hpp) and a KV memory (core/kv_memory.hpp)
// this object owns. One call consumes a flattened StepBatch that mixes
// prefill chunks and decodes, and returns logits for its logits_rows.
// Serving reaches it through the CpuExecutor (core/cpu_executor.hpp); tests
// and core/generate.hpp drive it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/forward_timings.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace llmk {

class Model {
 public:
  // Builds linear layers (fusing q/k/v and gate/up), the attention plugin
  // and the KV cache. The checkpoint must outlive the model. In a parallel
  // job, this rank's share only (core/parallel.hpp): every rank of the job
  // calls forward() with the same batch, and the logits arrive at rank 0.
  Model(std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
        const ModelRuntime& runtime, std::shared_ptr<ParallelJob> job = nullptr);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ModelRuntime& runtime() const;
  // logits: [batch.num_logits(), vocab_size], row i for batch.logits_rows[i]
  // (written at world rank 0 only; other ranks of a job may pass nullptr).
  void forward(const StepBatch& batch, float* logits);
  // The same forward ending before lm_head: hidden: [batch.num_logits(),
  // hidden_size], row i the final-RMSNorm output of batch.logits_rows[i]
  // (core/embedding.hpp pools them). Skips the lm_head product, the
  // [rows, hidden] x [hidden, vocab] matmul that dominates a small model's
  // prefill rows. Error(unsupported) on a pipeline-parallel model.
  void forward_hidden(const StepBatch& batch, float* hidden);
  // The final-RMSNorm rows of the latest forward()'s logits rows (lm_head's
  // input), copied to hidden[num_rows, hidden_size]; valid until the next
  // forward. False in a parallel job (no rank holds them all) or where
  // num_rows is not that forward's num_logits().
  bool copy_last_hidden(int32_t num_rows, float* hidden) const;
  // This rank's share of the model (the whole model outside a parallel job).
  const ModelShard& shard() const;
  // Every later forward adds its operations' wall time to *timings (nullptr:
  // stop). The caller keeps timings alive meanwhile.
  void time_forwards(ForwardTimings* timings);
  // Pipeline parallelism, on a stage before the last: `handover` (rows x
  // hidden floats of the residual stream) replaces the forward's own ending,
  // which sends them to the next stage and, at world rank 0, waits for the
  // logits from the last stage. The caller then sends them itself, after
  // whatever must reach the next stage first, and takes the logits when it
  // chooses: the pipelined executor (core/parallel_executor.hpp) keeps
  // several steps in flight that way. An empty function restores the
  // forward's own ending.
  using StageHandover = std::function<void(const float* rows, size_t count)>;
  void set_stage_handover(StageHandover handover);
  size_t weight_bytes() const;    // in the linear plugins' formats plus embeddings and norms
  size_t kv_cache_bytes() const;

  // Host copies of KV slots, for offload-style preemption: all layers' K/V of
  // slots [first, first + n) in an opaque buffer, and back.
  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) const;
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data);
  // The attention plugin reads token trees (attention API 3.3 or later).
  bool attends_token_trees() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk
