#include "kernels/cpu/hadamard.hpp"

#include <cmath>

namespace llmk::kernels::cpu {

void hadamard_blocks(float* x, int64_t n, int64_t block) {
  if (block <= 1) return;
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    float* v = x + b0;
    // Butterflies of growing span: log2(block) passes of sums and differences.
    for (int64_t span = 1; span < block; span *= 2)
      for (int64_t i = 0; i < block; i += 2 * span)
#pragma omp simd
        for (int64_t j = i; j < i + span; ++j) {
          const float a = v[j], b = v[j + span];
          v[j] = a + b;
          v[j + span] = a - b;
        }
#pragma omp simd
    for (int64_t i = 0; i < block; ++i) v[i] *= norm;
  }
}

}  // namespace llmk::kernels::cpu
