#include "core/token_bitmask.hpp"

#include <algorithm>
#include <limits>

namespace llmk {

void apply_token_bitmask(const float* logits, int32_t vocab_size, std::span<const uint32_t> bitmask, float* out) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const auto covered = static_cast<int32_t>(std::min<int64_t>(vocab_size, static_cast<int64_t>(bitmask.size()) * 32));
  int32_t id = 0;
  for (size_t w = 0; id < covered; ++w) {
    const uint32_t bits = bitmask[w];
    const int32_t end = std::min(id + 32, covered);
    if (bits == 0) {
      std::fill(out + id, out + end, kMasked);
    } else if (bits == ~0u) {
      std::copy(logits + id, logits + end, out + id);
    } else {
      for (int32_t i = id; i < end; ++i) out[i] = (bits >> (i - id)) & 1u ? logits[i] : kMasked;
    }
    id = end;
  }
  std::fill(out + covered, out + vocab_size, kMasked);
}

}  // namespace llmk
