// Checks shared by the allocators that give each sequence one contiguous
// range of slots (kv.contiguous, kv.vm): a block table entry is the range's
// first slot, and a range is at most max_seq_len long.
#pragma once

#include <cstdint>
#include <string>

#include "plugins/api/llmk_kv_allocator.h"

namespace llmk::kv_common {

inline bool supports_range_desc(const llmk_kv_allocator_desc& desc, std::string& why) {
  if (desc.max_seq_len == 0) {
    why = "max_seq_len is 0";
    return false;
  }
  if (desc.num_slots < desc.max_seq_len) {
    why = "num_slots " + std::to_string(desc.num_slots) + " is smaller than one sequence of max_seq_len " +
          std::to_string(desc.max_seq_len);
    return false;
  }
  if (desc.num_slots > static_cast<uint32_t>(INT32_MAX)) {
    why = "num_slots does not fit a block table entry";
    return false;
  }
  return true;
}

}  // namespace llmk::kv_common
