// The Engine tests' stories260K configuration: one executor thread, paged KV
// in 16-token blocks, room for 64 sequences. Tests change what they exercise
// (device, plugins, speculation) on a copy.
#pragma once

#include "core/config.hpp"

namespace llmk::test {

inline EngineConfig stories_config() {
  EngineConfig cfg;
  cfg.model.path = LLMK_SHARED_DIR "/models/stories260K";
  cfg.executor.num_threads = 1;
  cfg.kv_cache.capacity_tokens = 16384;
  cfg.kv_cache.block_size = 16;
  cfg.plugins.kv_allocator = "kv.paged";
  cfg.scheduler.max_num_seqs = 64;
  cfg.scheduler.max_num_batched_tokens = 512;
  return cfg;
}

}  // namespace llmk::test
