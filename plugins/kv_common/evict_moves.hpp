// StreamingLLM eviction in an allocator of one range per sequence (kv.contiguous,
// kv.vm): dropping positions [first, first + count) of a range holding
// `length` positions moves the later ones down by count. The moves are cut
// into copies of at most count slots, in order, so no copy's source overlaps
// its destination (a device copy need not behave as memmove).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk::kv_common {

// Appends the copies at copies[*num_copies...]; false when max_copies is too few.
inline bool evict_moves(uint32_t range_start, uint32_t first, uint32_t count, uint32_t length, llmk_kv_copy* copies,
                        uint32_t max_copies, uint32_t* num_copies) {
  for (uint32_t dst = first; dst + count < length; dst += count) {
    if (*num_copies >= max_copies) return false;
    copies[(*num_copies)++] = llmk_kv_copy{static_cast<int32_t>(range_start + dst + count),
                                           static_cast<int32_t>(range_start + dst),
                                           static_cast<int32_t>(std::min(count, length - (dst + count)))};
  }
  return true;
}

// The arguments evict_tokens refuses, as a message; empty when they are fine.
inline std::string evict_range_error(uint32_t first, uint32_t count, uint32_t length) {
  if (count == 0 || static_cast<uint64_t>(first) + count > length)
    return "cannot evict positions [" + std::to_string(first) + ", " + std::to_string(uint64_t{first} + count) +
           ") of " + std::to_string(length);
  return {};
}

}  // namespace llmk::kv_common
