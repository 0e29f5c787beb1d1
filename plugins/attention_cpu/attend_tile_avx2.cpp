// The register-tiled prefill kernel (attend_tile.hpp) for CPUs with AVX2 +
// FMA and no AVX-512. With 16 registers of 8 floats, both products run in
// strips: scores as 6 rows x 16 keys (12 accumulators, 4 strips per chunk),
// P V as 6 rows x 16 dimensions; leftover rows take one row at a time.
#include "plugins/attention_cpu/attend_tile.hpp"

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vec_math.hpp"

namespace llmk::attention_cpu {

namespace {

constexpr int kKeyVecs = kTileKeys / 8;

// scores[r, 0:8 NV] = scale * q_r . k_t[:, 0:8 NV] for RG rows; k_t and
// scores point at the strip's first key.
template <int RG, int NV>
inline void score_strip(const float* const* q, int head_dim, const float* k_t, float scale, float* scores) {
  __m256 acc[RG][NV];
  for (int r = 0; r < RG; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm256_setzero_ps();
  for (int d = 0; d < head_dim; ++d) {
    __m256 k[NV];
    for (int j = 0; j < NV; ++j) k[j] = _mm256_loadu_ps(k_t + d * kTileKeys + 8 * j);
    for (int r = 0; r < RG; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q[r] + d);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm256_fmadd_ps(qv, k[j], acc[r][j]);
    }
  }
  const __m256 sv = _mm256_set1_ps(scale);
  for (int r = 0; r < RG; ++r)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(scores + r * kTileKeys + 8 * j, _mm256_mul_ps(acc[r][j], sv));
}

// acc_r[d0:d0 + 16] = acc_r * alpha_r + sum_j p[r, j] v_j[d0:d0 + 16] for RG rows, keys [0, num_keys).
template <int RG>
inline void accumulate_strip(const float* p, const float* alpha, const float* const* v_rows, int num_keys, float* acc,
                             int head_dim, int d0) {
  __m256 a[RG][2];
  for (int r = 0; r < RG; ++r) {
    const __m256 al = _mm256_set1_ps(alpha[r]);
    for (int d = 0; d < 2; ++d) a[r][d] = _mm256_mul_ps(al, _mm256_loadu_ps(acc + r * head_dim + d0 + 8 * d));
  }
  for (int j = 0; j < num_keys; ++j) {
    const __m256 v0 = _mm256_loadu_ps(v_rows[j] + d0), v1 = _mm256_loadu_ps(v_rows[j] + d0 + 8);
    for (int r = 0; r < RG; ++r) {
      const __m256 pv = _mm256_broadcast_ss(p + r * kTileKeys + j);
      a[r][0] = _mm256_fmadd_ps(pv, v0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(pv, v1, a[r][1]);
    }
  }
  for (int r = 0; r < RG; ++r)
    for (int d = 0; d < 2; ++d) _mm256_storeu_ps(acc + r * head_dim + d0 + 8 * d, a[r][d]);
}

}  // namespace

bool tile_supports(int head_dim) { return head_dim % 16 == 0 && head_dim <= 128 && head_dim > 0; }

void attend_chunk_tiled(const float* const* q_rows, const int64_t* low_key, const int64_t* last_key, int num_rows,
                        const float* const* k_rows, const float* const* v_rows, int64_t first_key, int num_keys,
                        int head_dim, float scale, float* scores, RowsState state, float* k_t, float* alpha) {
  // Keys transposed: k_t[d, j] = k_j[d]; missing keys are zero (masked below).
  for (int j = 0; j < kTileKeys; ++j)
    for (int d = 0; d < head_dim; ++d) k_t[d * kTileKeys + j] = j < num_keys ? k_rows[j][d] : 0.0f;

  int r = 0;
  for (; r + 6 <= num_rows; r += 6)
    for (int s = 0; s < kTileKeys; s += 16)
      score_strip<6, 2>(q_rows + r, head_dim, k_t + s, scale, scores + r * kTileKeys + s);
  for (; r < num_rows; ++r) score_strip<1, kKeyVecs>(q_rows + r, head_dim, k_t, scale, scores + r * kTileKeys);

  // Online softmax per row over its visible keys [lo, visible) of the chunk
  // (a prefix unless a sliding window cuts its start); hidden keys get p = 0.
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int max_visible = 0;
  for (int i = 0; i < num_rows; ++i) {
    const int visible = static_cast<int>(std::clamp<int64_t>(last_key[i] - first_key + 1, 0, num_keys));
    const int lo = static_cast<int>(std::clamp<int64_t>(low_key[i] - first_key, 0, visible));
    max_visible = std::max(max_visible, visible);
    float* s = scores + i * kTileKeys;
    if (visible == lo) {
      alpha[i] = 1.0f;
      for (int j = 0; j < kTileKeys; j += 8) _mm256_storeu_ps(s + j, _mm256_setzero_ps());
      continue;
    }
    __m256 mx = neg_inf;
    __m256 masks[kKeyVecs];
    for (int j = 0; j < kKeyVecs; ++j) {
      // Lanes l with lo <= 8 j + l < visible.
      const __m256i below_end = _mm256_cmpgt_epi32(_mm256_set1_epi32(visible - 8 * j), lanes);
      const __m256i below_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo - 8 * j), lanes);
      masks[j] = _mm256_castsi256_ps(_mm256_andnot_si256(below_lo, below_end));
      mx = _mm256_max_ps(mx, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(s + 8 * j), masks[j]));
    }
    const float m_new = std::max(state.m[i], kernels::cpu::hmax8(mx));
    alpha[i] = std::exp(state.m[i] - m_new);
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < kKeyVecs; ++j) {
      const __m256 e = _mm256_and_ps(masks[j], kernels::cpu::exp256(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * j), mv)));
      _mm256_storeu_ps(s + 8 * j, e);
      sum = _mm256_add_ps(sum, e);
    }
    state.l[i] = state.l[i] * alpha[i] + kernels::cpu::hsum8(sum);
    state.m[i] = m_new;
  }
  r = 0;
  for (; r + 6 <= num_rows; r += 6)
    for (int d0 = 0; d0 < head_dim; d0 += 16)
      accumulate_strip<6>(scores + r * kTileKeys, alpha + r, v_rows, max_visible, state.acc + r * head_dim, head_dim, d0);
  for (; r < num_rows; ++r)
    for (int d0 = 0; d0 < head_dim; d0 += 16)
      accumulate_strip<1>(scores + r * kTileKeys, alpha + r, v_rows, max_visible, state.acc + r * head_dim, head_dim, d0);
}

}  // namespace llmk::attention_cpu

#endif
