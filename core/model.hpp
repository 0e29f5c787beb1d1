// The Llama forward pass as a sequence of kernel and plugin calls, over a
// KV cache this object owns. One call consumes a flattened StepBatch that
// mixes prefill chunks and decodes, and returns logits for its logits_rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace llmk {

// Values derived from the config and the model at start-up.
struct ModelRuntime {
  uint32_t num_threads = 1;
  uint32_t num_kv_slots = 0;      // token slots in the KV cache
  uint32_t max_seq_len = 0;       // context limit
  uint32_t max_step_tokens = 0;   // most new tokens in one forward
  DType kv_dtype = DType::f32;
  uint32_t kv_group_size = 8;
  uint32_t key_rotation = 0;      // Hadamard block for queries and keys (0: none)
  bool prefault_kv = false;
};

// Resolves thread count, KV slots (from capacity_tokens, capacity_bytes or
// capacity_fraction), context limit and step size.
ModelRuntime resolve_runtime(const EngineConfig& cfg, const ModelConfig& model);

class Model {
 public:
  // Builds linear layers (fusing q/k/v and gate/up), the attention plugin
  // and the KV cache. The checkpoint must outlive the model.
  Model(std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
        const ModelRuntime& runtime);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ModelRuntime& runtime() const;
  // logits: [batch.num_logits(), vocab_size], row i for batch.logits_rows[i].
  void forward(const StepBatch& batch, float* logits);
  size_t weight_bytes() const;    // in the linear plugins' formats plus embeddings and norms
  size_t kv_cache_bytes() const;

  // Host copies of KV slots, for offload-style preemption: all layers' K/V of
  // slots [first, first + n) in an opaque buffer, and back.
  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) const;
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk
