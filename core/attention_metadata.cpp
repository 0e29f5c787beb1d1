#include "core/attention_metadata.hpp"

#include <algorithm>
#include <cmath>

namespace llmk {

llmk_attention_desc attention_desc(const ModelConfig& model, const ModelRuntime& rt, const EngineConfig& ecfg,
                                   llmk_device device) {
  llmk_attention_desc ad{};
  ad.struct_size = sizeof(ad);
  ad.num_heads = static_cast<uint32_t>(model.num_heads);
  ad.num_kv_heads = static_cast<uint32_t>(model.num_kv_heads);
  ad.head_dim = static_cast<uint32_t>(model.head_dim);
  ad.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(model.head_dim)));
  ad.kv_dtype = static_cast<uint32_t>(rt.kv_dtype);
  ad.kv_group_size = rt.kv_group_size;
  ad.max_context = rt.max_seq_len;
  ad.max_tokens = rt.max_step_tokens;
  ad.num_threads = device == LLMK_DEVICE_CPU ? rt.num_threads : 1;
  ad.options = ecfg.plugins.attention_options.c_str();
  // Out-of-window tokens keep their KV slots: the window changes what
  // attention reads, not what the cache holds (no memory is reclaimed).
  ad.sliding_window = model.sliding_window && static_cast<uint32_t>(*model.sliding_window) < rt.max_seq_len
                          ? static_cast<uint32_t>(*model.sliding_window)
                          : 0;
  ad.device = device;
  ad.activation_dtype = LLMK_DTYPE_F32;
  ad.max_seqs = std::max<uint32_t>(1, ecfg.scheduler.max_num_seqs);
  // The block size is the KV allocator's alone: the allocator is made after
  // the executor (sized to its KV slots), and its block size reaches the
  // plugin with every step (llmk_attention_step.block_size). 0: no hint.
  ad.block_size = 0;
  // StreamingLLM: the sinks stay visible and are scored with q_sink (API 3.2).
  ad.sink_tokens = ecfg.kv_cache.window > 0 ? ecfg.kv_cache.sink_tokens : 0;
  return ad;
}

llmk_attention_step attention_step(const StepBatch& b, uint32_t num_slots, const AttentionStepArrays& device) {
  llmk_attention_step step{};
  step.struct_size = sizeof(step);
  step.num_tokens = static_cast<uint32_t>(b.num_tokens());
  step.num_seqs = static_cast<uint32_t>(b.num_seqs());
  step.max_blocks_per_seq = static_cast<uint32_t>(b.max_blocks_per_seq);
  step.block_size = static_cast<uint32_t>(b.block_size);
  step.num_slots = num_slots;
  step.query_start = b.query_start.data();
  step.context_lens = b.context_lens.data();
  step.slot_mapping = b.slot_mapping.data();
  step.block_tables = b.block_tables.data();
  step.device_query_start = device.query_start;
  step.device_context_lens = device.context_lens;
  step.device_slot_mapping = device.slot_mapping;
  step.device_block_tables = device.block_tables;
  if (!b.tree_parents.empty()) {
    step.tree_parents = b.tree_parents.data();
    step.device_tree_parents = device.tree_parents;
  }
  return step;
}

llmk_attention_step attention_step(const StepBatch& b, uint32_t num_slots) {
  return attention_step(b, num_slots,
                        {b.query_start.data(), b.context_lens.data(), b.slot_mapping.data(), b.block_tables.data(),
                         b.tree_parents.empty() ? nullptr : b.tree_parents.data()});
}

}  // namespace llmk
