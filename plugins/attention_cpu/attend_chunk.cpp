#include "plugins/attention_cpu/attend_chunk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vec_math.hpp"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace llmk::attention_cpu {

namespace {

inline float dot(const float* a, const float* b, int n) {
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  const __m256 v = _mm256_add_ps(acc0, acc1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float s = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
#else
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
#endif
}

// y = y * alpha + p * x over n floats.
inline void scale_add(float* y, float alpha, float p, const float* x, int n) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512 av = _mm512_set1_ps(alpha), pv = _mm512_set1_ps(p);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(pv, _mm512_loadu_ps(x + i), _mm512_mul_ps(av, _mm512_loadu_ps(y + i))));
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 av = _mm256_set1_ps(alpha), pv = _mm256_set1_ps(p);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(x + i), _mm256_mul_ps(av, _mm256_loadu_ps(y + i))));
#endif
  for (; i < n; ++i) y[i] = y[i] * alpha + p * x[i];
}

// s[i] = exp(s[i] - m) over n floats; returns their sum.
inline float exp_shift_sum(float* s, float m, int n) {
  int i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = kernels::cpu::exp512(_mm512_sub_ps(_mm512_loadu_ps(s + i), mv));
    _mm512_storeu_ps(s + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  sum = _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = kernels::cpu::exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#endif
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - m);
    sum += s[i];
  }
  return sum;
}

}  // namespace

void attend_chunk(const float* const* q_rows, const int64_t* low_key, const int64_t* last_key, int num_rows,
                  const float* const* k_rows, const float* const* v_rows, int64_t first_key, int num_keys,
                  int head_dim, float scale, float* scores, RowsState state) {
  for (int r = 0; r < num_rows; ++r) {
    // Keys this row may see in the chunk: [lo, hi), by causality and the window.
    const int hi = static_cast<int>(std::clamp<int64_t>(last_key[r] - first_key + 1, 0, num_keys));
    const int lo = static_cast<int>(std::clamp<int64_t>(low_key[r] - first_key, 0, hi));
    if (hi == lo) continue;
    float* s = scores + static_cast<int64_t>(r) * num_keys;
    float chunk_max = -std::numeric_limits<float>::infinity();
    for (int j = lo; j < hi; ++j) {
      s[j] = dot(q_rows[r], k_rows[j], head_dim) * scale;
      chunk_max = std::max(chunk_max, s[j]);
    }
    const float m_old = state.m[r];
    const float m_new = std::max(m_old, chunk_max);
    const float alpha = std::exp(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
    const float chunk_sum = exp_shift_sum(s + lo, m_new, hi - lo);
    state.l[r] = state.l[r] * alpha + chunk_sum;
    state.m[r] = m_new;
    float* acc = state.acc + static_cast<int64_t>(r) * head_dim;
    scale_add(acc, alpha, s[lo], v_rows[lo], head_dim);
    for (int j = lo + 1; j < hi; ++j) scale_add(acc, 1.0f, s[j], v_rows[j], head_dim);
  }
}

void finish_rows(RowsState state, int num_rows, int head_dim, float* const* out_rows) {
  for (int r = 0; r < num_rows; ++r) {
    const float inv = state.l[r] > 0.0f ? 1.0f / state.l[r] : 0.0f;
    const float* acc = state.acc + static_cast<int64_t>(r) * head_dim;
    for (int i = 0; i < head_dim; ++i) out_rows[r][i] = acc[i] * inv;
  }
}

}  // namespace llmk::attention_cpu
