#include "kernels/cpu/embedding.hpp"

#include <cstring>

#include "kernels/cpu/convert.hpp"

namespace llmk::kernels::cpu {

bool embedding(const void* table, llmk_dtype dtype, int64_t dim, const int32_t* ids, int64_t num_tokens,
               float* out) {
  if (dtype != LLMK_DTYPE_F32 && dtype != LLMK_DTYPE_F16 && dtype != LLMK_DTYPE_BF16) return false;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t row = static_cast<int64_t>(ids[t]) * dim;
    float* dst = out + t * dim;
    switch (dtype) {
      case LLMK_DTYPE_F32:
        std::memcpy(dst, static_cast<const float*>(table) + row, static_cast<size_t>(dim) * sizeof(float));
        break;
      case LLMK_DTYPE_F16:
        f16_to_f32(static_cast<const uint16_t*>(table) + row, dst, dim);
        break;
      default:
        bf16_to_f32(static_cast<const uint16_t*>(table) + row, dst, dim);
        break;
    }
  }
  return true;
}

}  // namespace llmk::kernels::cpu
