// The CPU executor's KV memory: for every layer, the arrays the attention
// plugin's declared layout names (K, V, and scales when it has them), each
// slot-major with a fixed number of bytes per token slot. The KV allocator
// plugin hands out slots; this object only holds the bytes, applies the
// allocator's slot copies, and saves and restores slots for offload
// preemption, never interpreting what a slot holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/model_runtime.hpp"
#include "plugins/api/llmk_attention.h"
#include "plugins/api/llmk_kv_allocator.h"

namespace llmk {

class KvMemory {
 public:
  // Allocates every layer's buffers (prefaulted when runtime.prefault_kv).
  // Throws Error(plugin) for a layout whose alignment exceeds 64 bytes.
  KvMemory(int32_t num_layers, const ModelRuntime& runtime, const llmk_kv_layout& layout);

  // Layer `i`'s K/V in the attention plugin's terms.
  llmk_kv_layer layer(int32_t i);
  size_t bytes() const;

  // Applies the allocator's copies (copy-on-write, relocation) to every
  // layer, in order. Throws Error(invalid_argument) for a copy outside the cache.
  void apply_copies(const std::vector<llmk_kv_copy>& copies);

  // All layers' K/V (and scales) of the given slots in one host buffer, and
  // back into other slots (same count). Throws Error(invalid_argument) for a
  // slot outside the cache or a buffer of the wrong size.
  std::vector<uint8_t> save(const std::vector<int32_t>& slots) const;
  void restore(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data);

 private:
  struct Layer {
    // [num_slots, bytes per slot] each, as the layout says; scales empty when it has none.
    AlignedBuffer k, v, k_scale, v_scale;
  };
  size_t saved_bytes_per_slot() const;

  uint32_t num_slots_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace llmk
