// Shared by the panel GEMM kernels (matmul_packed, matmul_pairs): the shape,
// clearing and store of one register tile of MR rows x 64 output columns.
#pragma once

#include <algorithm>
#include <cstdint>

namespace llmk::kernels::cpu {
constexpr int kTileRows = 6;  // activation rows per register tile (6 x 64 outputs = 24 accumulators)
}  // namespace llmk::kernels::cpu

#if defined(__AVX512F__)
#include <immintrin.h>

namespace llmk::kernels::cpu {

template <int MR>
inline void zero_tile(__m512 (&acc)[MR][4]) {
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
}

// c[m, 0:64] (+)= acc[m] for MR rows; only the first num_cols columns.
template <int MR>
inline void store_tile(const __m512 (&acc)[MR][4], float* c, int64_t ldc, bool accumulate, int num_cols) {
  for (int j = 0; j < 4; ++j) {
    const int valid = std::clamp(num_cols - 16 * j, 0, 16);
    if (valid == 0) break;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    for (int m = 0; m < MR; ++m) {
      float* cp = c + m * ldc + 16 * j;
      __m512 v = acc[m][j];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cp));
      _mm512_mask_storeu_ps(cp, mask, v);
    }
  }
}

}  // namespace llmk::kernels::cpu

#endif
