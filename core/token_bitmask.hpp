// A structured output's token bitmask (core/grammar.hpp) applied to a row of
// logits, for the CPU sampler. No XGrammar here: the layout is plain bits.
#pragma once

#include <cstdint>
#include <span>

namespace llmk {

// True when `id` is allowed: bit (id % 32) of word (id / 32); ids past the
// mask's bits are not.
inline bool token_allowed(std::span<const uint32_t> bitmask, int32_t id) {
  const auto word = static_cast<size_t>(id) / 32;
  return id >= 0 && word < bitmask.size() && ((bitmask[word] >> (static_cast<uint32_t>(id) % 32)) & 1u) != 0;
}

// out[i] = logits[i] where the mask allows id i, else -infinity. [vocab_size] each.
void apply_token_bitmask(const float* logits, int32_t vocab_size, std::span<const uint32_t> bitmask, float* out);

}  // namespace llmk
