// Values derived from the engine config and the model at start-up: threads,
// context limit, step size and the KV memory's size in token slots. Every
// executor resolves these once; the scheduler and the KV allocator read them
// from Executor::runtime().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/config.hpp"
#include "core/model_config.hpp"

namespace llmk {

class Checkpoint;

struct ModelRuntime {
  uint32_t num_threads = 1;
  uint32_t num_kv_slots = 0;      // token slots in the KV cache
  uint32_t max_seq_len = 0;       // context limit
  uint32_t max_step_tokens = 0;   // most new tokens in one forward
  DType kv_dtype = DType::f32;
  std::string kv_dtype_reason = "kv_cache.dtype";  // why this type: resolve_kv_dtype's reason
  uint32_t kv_group_size = 8;
  uint32_t key_rotation = 0;      // Hadamard block for queries and keys (0: none)
  bool prefault_kv = false;
};

// The KV cache's element type and why it was chosen.
struct KvDtypeChoice {
  DType dtype = DType::f32;
  std::string reason;  // "kv_cache.dtype" when configured; "auto: GGUF", "auto: BF16 checkpoint", ...
};

// kv_cache.dtype resolved against the weights. A configured type is kept.
// auto follows the checkpoint, as llama.cpp and vLLM do: f16 for a GGUF file
// (llama.cpp's default cache type, whatever its tensors' types), else the
// checkpoint's storage type (config.json's torch_dtype, a preset's dtype):
// f32, f16 or bf16. On the CPU device, whose attention keeps no bf16 cache,
// BF16 weights get f16 (the same bytes, a wider mantissa). `load_format` is
// resolve_load_format's name: "safetensors", "gguf" or "dummy".
KvDtypeChoice resolve_kv_dtype(const EngineConfig& cfg, const ModelConfig& model, std::string_view load_format);

// Resolves thread count, the KV dtype (resolve_kv_dtype), KV slots (from
// capacity_tokens, capacity_bytes or kv_cache.capacity_fraction of
// `memory_bytes`), context limit and step size. `memory_bytes` is the memory
// the fraction applies to: this machine's physical memory for the CPU, the
// device memory left after the weights for a GPU.
ModelRuntime resolve_runtime(const EngineConfig& cfg, const ModelConfig& model, std::string_view load_format,
                             uint64_t memory_bytes);

// The CPU's: the fraction applies to physical memory.
ModelRuntime resolve_runtime(const EngineConfig& cfg, const Checkpoint& checkpoint);

// kv_cache.window against the model: no wider than the context length or
// the model's own sliding window. Throws Error(invalid_config) naming the key.
void check_stream_window(const EngineConfig& cfg, const ModelConfig& model, uint32_t max_seq_len);

// Bytes of one token's K and V over all layers in the standard layout
// (scales included for I8): what resolve_runtime sizes the cache by.
uint64_t standard_kv_bytes_per_token(const ModelConfig& model, DType kv_dtype, uint32_t group_size);

// KV slots for the configured capacity when one token takes
// `bytes_per_token` (an attention plugin may declare a layout other than the
// standard one): capacity_tokens as given, capacity_bytes / bytes_per_token,
// or the fraction of `memory_bytes`, capped at max_num_seqs full contexts.
// Throws Error(invalid_config) when that holds no token.
uint32_t kv_slots_for(const EngineConfig& cfg, uint32_t max_seq_len, uint64_t bytes_per_token, uint64_t memory_bytes);

}  // namespace llmk
