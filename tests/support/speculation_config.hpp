// Prompt-lookup speculation as the Engine tests configure it: 4 drafts from
// suffixes of 1 to 3 tokens; with width > 1, token trees of up to 12 nodes
// (speculative.tree_width, docs/speculative.md).
#pragma once

#include <cstdint>

#include "core/config.hpp"

namespace llmk::test {

inline EngineConfig with_ngram_speculation(EngineConfig cfg, uint32_t tree_width) {
  cfg.speculative.method = "ngram";
  cfg.speculative.num_tokens = 4;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  cfg.speculative.tree_width = tree_width;
  cfg.speculative.tree_nodes = tree_width > 1 ? 12 : 0;
  return cfg;
}

}  // namespace llmk::test
