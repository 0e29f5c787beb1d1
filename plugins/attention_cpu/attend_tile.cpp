#include "plugins/attention_cpu/attend_tile.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vec_math.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmk::attention_cpu {

#if defined(__AVX512F__)

namespace {

constexpr int kKeyVecs = kTileKeys / 16;

// scores[r, 0:64] = scale * q_r . k_t[:, 0:64] for RG rows.
template <int RG>
inline void score_rows(const float* const* q, int head_dim, const float* k_t, float scale, float* scores) {
  __m512 acc[RG][kKeyVecs];
  for (int r = 0; r < RG; ++r)
    for (int j = 0; j < kKeyVecs; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int d = 0; d < head_dim; ++d) {
    const float* kd = k_t + d * kTileKeys;
    const __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16), k2 = _mm512_loadu_ps(kd + 32),
                 k3 = _mm512_loadu_ps(kd + 48);
    for (int r = 0; r < RG; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r][d]);
      acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(qv, k2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(qv, k3, acc[r][3]);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int r = 0; r < RG; ++r)
    for (int j = 0; j < kKeyVecs; ++j) _mm512_storeu_ps(scores + r * kTileKeys + 16 * j, _mm512_mul_ps(acc[r][j], sv));
}

// acc_r[0:DV*16] = acc_r * alpha_r + sum_j p[r, j] v_j for RG rows, keys [0, num_keys).
template <int RG, int DV>
inline void accumulate_rows(const float* p, const float* alpha, const float* const* v_rows, int num_keys, float* acc,
                            int head_dim) {
  __m512 a[RG][DV];
  for (int r = 0; r < RG; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]);
    for (int d = 0; d < DV; ++d) a[r][d] = _mm512_mul_ps(al, _mm512_loadu_ps(acc + r * head_dim + 16 * d));
  }
  for (int j = 0; j < num_keys; ++j) {
    __m512 v[DV];
    for (int d = 0; d < DV; ++d) v[d] = _mm512_loadu_ps(v_rows[j] + 16 * d);
    for (int r = 0; r < RG; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * kTileKeys + j]);
      for (int d = 0; d < DV; ++d) a[r][d] = _mm512_fmadd_ps(pv, v[d], a[r][d]);
    }
  }
  for (int r = 0; r < RG; ++r)
    for (int d = 0; d < DV; ++d) _mm512_storeu_ps(acc + r * head_dim + 16 * d, a[r][d]);
}

template <int DV>
void accumulate_all(const float* p, const float* alpha, const float* const* v_rows, int num_keys, float* acc,
                    int num_rows, int head_dim) {
  constexpr int RG = DV <= 4 ? 6 : 3;  // 24 accumulators
  int r = 0;
  for (; r + RG <= num_rows; r += RG)
    accumulate_rows<RG, DV>(p + r * kTileKeys, alpha + r, v_rows, num_keys, acc + r * head_dim, head_dim);
  for (; r < num_rows; ++r)
    accumulate_rows<1, DV>(p + r * kTileKeys, alpha + r, v_rows, num_keys, acc + r * head_dim, head_dim);
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
  for (; r + 6 <= num_rows; r += 6) score_rows<6>(q_rows + r, head_dim, k_t, scale, scores + r * kTileKeys);
  for (; r < num_rows; ++r) score_rows<1>(q_rows + r, head_dim, k_t, scale, scores + r * kTileKeys);

  // Online softmax per row over its visible keys [lo, visible) of the chunk
  // (a prefix unless a sliding window cuts its start); hidden keys get p = 0.
  int max_visible = 0;
  for (int i = 0; i < num_rows; ++i) {
    const int visible = static_cast<int>(std::clamp<int64_t>(last_key[i] - first_key + 1, 0, num_keys));
    const int lo = static_cast<int>(std::clamp<int64_t>(low_key[i] - first_key, 0, visible));
    max_visible = std::max(max_visible, visible);
    float* s = scores + i * kTileKeys;
    if (visible == lo) {
      alpha[i] = 1.0f;
      for (int j = 0; j < kTileKeys; j += 16) _mm512_storeu_ps(s + j, _mm512_setzero_ps());
      continue;
    }
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __mmask16 masks[kKeyVecs];
    for (int j = 0; j < kKeyVecs; ++j) {
      const int valid = std::clamp(visible - 16 * j, 0, 16), hidden = std::clamp(lo - 16 * j, 0, 16);
      const uint32_t below_end = valid == 16 ? 0xffffu : (1u << valid) - 1u;
      const uint32_t below_lo = hidden == 16 ? 0xffffu : (1u << hidden) - 1u;
      masks[j] = static_cast<__mmask16>(below_end & ~below_lo);
      mx = _mm512_mask_max_ps(mx, masks[j], mx, _mm512_loadu_ps(s + 16 * j));
    }
    const float m_new = std::max(state.m[i], _mm512_reduce_max_ps(mx));
    alpha[i] = std::exp(state.m[i] - m_new);
    const __m512 mv = _mm512_set1_ps(m_new);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < kKeyVecs; ++j) {
      const __m512 e = _mm512_maskz_mov_ps(masks[j], kernels::cpu::exp512(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * j), mv)));
      _mm512_storeu_ps(s + 16 * j, e);
      sum = _mm512_add_ps(sum, e);
    }
    state.l[i] = state.l[i] * alpha[i] + _mm512_reduce_add_ps(sum);
    state.m[i] = m_new;
  }
  if (head_dim / 16 <= 4) {
    switch (head_dim / 16) {
      case 1: accumulate_all<1>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      case 2: accumulate_all<2>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      case 3: accumulate_all<3>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      default: accumulate_all<4>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
    }
  } else {
    switch (head_dim / 16) {
      case 5: accumulate_all<5>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      case 6: accumulate_all<6>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      case 7: accumulate_all<7>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
      default: accumulate_all<8>(scores, alpha, v_rows, max_visible, state.acc, num_rows, head_dim); break;
    }
  }
}

#elif !(defined(__AVX2__) && defined(__FMA__))  // AVX2 + FMA: attend_tile_avx2.cpp; others: the row-by-row kernel

bool tile_supports(int) { return false; }

void attend_chunk_tiled(const float* const* q_rows, const int64_t* low_key, const int64_t* last_key, int num_rows,
                        const float* const* k_rows, const float* const* v_rows, int64_t first_key, int num_keys,
                        int head_dim, float scale, float* scores, RowsState state, float*, float*) {
  attend_chunk(q_rows, low_key, last_key, num_rows, k_rows, v_rows, first_key, num_keys, head_dim, scale, scores,
               state);
}

#endif

}  // namespace llmk::attention_cpu
