// The CUDA executor's KV memory: for every layer, the arrays the attention
// plugin's declared layout names (K, V, and scales when it has them), in
// device memory, slot-major with a fixed number of bytes per token slot. As
// the CPU's KvMemory (core/kv_memory.hpp) it only holds the bytes, applies the
// KV allocator's slot copies (on the executor's stream), and saves and
// restores slots for offload preemption.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cuda/device_memory.hpp"
#include "plugins/api/llmk_attention.h"
#include "plugins/api/llmk_kv_allocator.h"

namespace llmk {

// Bytes one token takes over `num_layers` layers in `layout`.
uint64_t kv_bytes_per_token(const llmk_kv_layout& layout, int32_t num_layers);

class CudaKvMemory {
 public:
  CudaKvMemory() = default;
  // Allocates and zeroes every layer's arrays for `num_slots` slots.
  CudaKvMemory(int32_t num_layers, uint32_t num_slots, const llmk_kv_layout& layout);

  // Layer `i`'s K/V in the attention plugin's terms.
  llmk_kv_layer layer(int32_t i) const;
  size_t bytes() const { return bytes_; }

  // Enqueues the allocator's copies (copy-on-write, relocation) on `stream`
  // for every layer, in order. Throws Error(invalid_argument) for a copy
  // outside the cache.
  void apply_copies(const std::vector<llmk_kv_copy>& copies, cudaStream_t stream);

  // All layers' K/V (and scales) of the given slots in one host buffer, and
  // back into other slots (same count), after the work on `stream` finished.
  // Throws Error(invalid_argument) for a slot outside the cache or a buffer
  // of the wrong size.
  std::vector<uint8_t> save(const std::vector<int32_t>& slots, cudaStream_t stream);
  void restore(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data, cudaStream_t stream);

 private:
  // K, V, K scales, V scales: [num_slots, per_slot_[a]] each, empty when the
  // layout has none.
  using Layer = std::array<cuda::DeviceBuffer, 4>;
  size_t saved_bytes_per_slot() const;
  void check_slots(const std::vector<int32_t>& slots, const char* what) const;

  uint32_t num_slots_ = 0;
  std::array<uint64_t, 4> per_slot_{};  // bytes per slot of K, V, K scales, V scales
  std::vector<Layer> layers_;
  size_t bytes_ = 0;
};

}  // namespace llmk
