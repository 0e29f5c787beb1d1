#include "kernels/cpu/rope.hpp"

#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmk::kernels::cpu {

void rope_tables(double theta, int64_t head_dim, int64_t max_positions, float* cos_table, float* sin_table) {
  const int64_t half = head_dim / 2;
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(p) * inv_freq;
      cos_table[p * half + i] = static_cast<float>(std::cos(angle));
      sin_table[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

namespace {

inline void rope_head(const float* x, float* y, const float* c, const float* s, int64_t half) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= half; i += 16) {
    const __m512 x1 = _mm512_loadu_ps(x + i);
    const __m512 x2 = _mm512_loadu_ps(x + half + i);
    const __m512 cv = _mm512_loadu_ps(c + i);
    const __m512 sv = _mm512_loadu_ps(s + i);
    _mm512_storeu_ps(y + i, _mm512_fmsub_ps(x1, cv, _mm512_mul_ps(x2, sv)));
    _mm512_storeu_ps(y + half + i, _mm512_fmadd_ps(x2, cv, _mm512_mul_ps(x1, sv)));
  }
#endif
  for (; i < half; ++i) {
    const float x1 = x[i], x2 = x[half + i];
    y[i] = x1 * c[i] - x2 * s[i];
    y[half + i] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace

void rope(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t num_tokens,
          int64_t num_heads, int64_t head_dim, const int32_t* positions, const float* cos_table,
          const float* sin_table) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for if (num_tokens > 16)
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos_table + static_cast<int64_t>(positions[t]) * half;
    const float* s = sin_table + static_cast<int64_t>(positions[t]) * half;
    for (int64_t h = 0; h < num_heads; ++h)
      rope_head(src + t * src_stride + h * head_dim, dst + t * dst_stride + h * head_dim, c, s, half);
  }
}

}  // namespace llmk::kernels::cpu
