#pragma once

#include <cstdint>

#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// out[t, :] = float(table[ids[t], :]).
// table: [vocab, dim] of dtype LLMK_DTYPE_F32, F16 or BF16; ids: [num_tokens],
// each in [0, vocab) (checked by the caller); out: [num_tokens, dim].
// Returns false for any other dtype.
bool embedding(const void* table, llmk_dtype dtype, int64_t dim, const int32_t* ids, int64_t num_tokens,
               float* out);

}  // namespace llmk::kernels::cpu
