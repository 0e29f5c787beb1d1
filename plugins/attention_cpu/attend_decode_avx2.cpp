// The decode kernel (attend_decode.hpp) for CPUs with AVX2 + FMA and no
// AVX-512: the same tiles of 16 positions, each tile's 16 scores as two
// 8-lane halves folded by a horizontal-add tree, the online softmax once per
// tile, P V into accumulators of at most 8 registers at a time.
#include "plugins/attention_cpu/attend_decode.hpp"

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace llmk::attention_cpu {

namespace {

// Lane j of the result: the sum of the 8 lanes of p[j].
inline __m256 lane_sums8(const __m256* p) {
  const __m256 t0 = _mm256_hadd_ps(p[0], p[1]), t1 = _mm256_hadd_ps(p[2], p[3]);
  const __m256 t2 = _mm256_hadd_ps(p[4], p[5]), t3 = _mm256_hadd_ps(p[6], p[7]);
  // u0: sums of p0..p3 over lanes 0-3 (low half) and 4-7 (high half); u1: p4..p7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline float hmax8(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

inline float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// 8 cached values as floats: F32 as stored, F16 widened.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// One query head meets one tile of up to 16 positions (k[j] + off, v[j] + off
// for j < n; entries past n must still point at readable rows).
template <int NV, class E>
inline void tile_head(const float* q, const E* const* k, const E* const* v, int64_t off, int n, float scale,
                      float& m, float& l, float* acc) {
  constexpr int V8 = 2 * NV;  // 8-float vectors per head
  const __m256 sv = _mm256_set1_ps(scale);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 scores[2], valid[2];
  for (int h = 0; h < 2; ++h) {
    __m256 part[8];
    for (int j = 0; j < 8; ++j) {
      const E* kj = k[8 * h + j] + off;
      __m256 s = _mm256_mul_ps(_mm256_loadu_ps(q), load8(kj));
      for (int i = 1; i < V8; ++i) s = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), load8(kj + 8 * i), s);
      part[j] = s;
    }
    valid[h] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8 * h), lanes));
    scores[h] = _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()),
                                 _mm256_mul_ps(lane_sums8(part), sv), valid[h]);
  }
  const float m_new = std::max(m, hmax8(_mm256_max_ps(scores[0], scores[1])));
  const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
  const __m256 mv = _mm256_set1_ps(m_new);
  const __m256 p0 = _mm256_and_ps(valid[0], kernels::cpu::exp256(_mm256_sub_ps(scores[0], mv)));
  const __m256 p1 = _mm256_and_ps(valid[1], kernels::cpu::exp256(_mm256_sub_ps(scores[1], mv)));
  l = l * alpha + hsum8(_mm256_add_ps(p0, p1));
  m = m_new;
  alignas(32) float pj[kDecodeTile];
  _mm256_store_ps(pj, p0);
  _mm256_store_ps(pj + 8, p1);
  // The head's accumulators in chunks of at most 8 registers that divide it.
  constexpr int kChunk = V8 <= 8 ? V8 : V8 % 8 == 0 ? 8 : V8 / 2;
  const __m256 av = _mm256_set1_ps(alpha);
  for (int i0 = 0; i0 < V8; i0 += kChunk) {
    __m256 a[kChunk];
    for (int i = 0; i < kChunk; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * (i0 + i)), av);
    for (int j = 0; j < n; ++j) {
      const __m256 w = _mm256_broadcast_ss(pj + j);
      const E* vj = v[j] + off + 8 * i0;
      for (int i = 0; i < kChunk; ++i) a[i] = _mm256_fmadd_ps(w, load8(vj + 8 * i), a[i]);
    }
    for (int i = 0; i < kChunk; ++i) _mm256_storeu_ps(acc + 8 * (i0 + i), a[i]);
  }
}

// An I8 slot's rows of the query's KV-head range, as floats. Groups never
// straddle heads, so the range's values and scales are contiguous.
inline void dequantize_range(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& dq, int64_t slot,
                             int64_t row, int64_t range, float* k_out, float* v_out) {
  const int64_t groups = shape.head_dim / shape.group_size;
  const int64_t scale_at = (slot * shape.num_kv_heads + dq.kv_begin) * groups;
  const int64_t at = slot * row + static_cast<int64_t>(dq.kv_begin) * shape.head_dim;
  kernels::cpu::kv_dequantize_row(static_cast<const int8_t*>(kv.k) + at, kv.k_scale + scale_at, k_out, range,
                                  shape.group_size);
  kernels::cpu::kv_dequantize_row(static_cast<const int8_t*>(kv.v) + at, kv.v_scale + scale_at, v_out, range,
                                  shape.group_size);
}

// E: the element type read by the tiles (float for F32 caches and for I8
// caches, which are dequantized into s.k_buf / s.v_buf first; uint16_t F16 bits).
template <int NV, class E>
void decode(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& dq, DecodeScratch& s) {
  constexpr int64_t hd = 16 * NV;
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * hd;  // one slot's K (or V) row
  const uint32_t num_kv = dq.kv_end - dq.kv_begin;
  const int64_t range = static_cast<int64_t>(num_kv) * hd;           // the range's part of it
  const uint32_t heads = num_kv * dq.group;
  std::fill_n(s.m, heads, -std::numeric_limits<float>::infinity());
  std::fill_n(s.l, heads, 0.0f);
  std::fill_n(s.acc, heads * hd, 0.0f);
  const float* q = dq.q + static_cast<int64_t>(dq.kv_begin) * dq.group * hd;

  // The next tile's rows are requested while this one computes when they fit
  // in L2 beside it (as in the AVX-512 kernel).
  const bool prefetch_next = !shape.int8 && 2 * kDecodeTile * range * static_cast<int64_t>(sizeof(E)) <= (64 << 10);
  const E* k_rows[kDecodeTile];
  const E* v_rows[kDecodeTile];
  for (int64_t t0 = dq.first_pos; t0 < dq.context_len; t0 += kDecodeTile) {
    const int n = static_cast<int>(std::min<int64_t>(kDecodeTile, dq.context_len - t0));
    for (int j = 0; j < n; ++j) {
      const int64_t slot = slot_of(dq.table, dq.block_size, t0 + j);
      if constexpr (std::is_same_v<E, uint16_t>) {
        k_rows[j] = static_cast<const uint16_t*>(kv.k) + slot * row + dq.kv_begin * hd;
        v_rows[j] = static_cast<const uint16_t*>(kv.v) + slot * row + dq.kv_begin * hd;
      } else if (!shape.int8) {
        k_rows[j] = static_cast<const float*>(kv.k) + slot * row + dq.kv_begin * hd;
        v_rows[j] = static_cast<const float*>(kv.v) + slot * row + dq.kv_begin * hd;
      } else {
        dequantize_range(kv, shape, dq, slot, row, range, s.k_buf + j * range, s.v_buf + j * range);
        k_rows[j] = s.k_buf + j * range;
        v_rows[j] = s.v_buf + j * range;
      }
    }
    for (int j = n; j < kDecodeTile; ++j) {
      k_rows[j] = k_rows[0];
      v_rows[j] = v_rows[0];
    }
    if (prefetch_next) {
      const int64_t t1 = t0 + kDecodeTile;
      const int n1 = static_cast<int>(std::clamp<int64_t>(dq.context_len - t1, 0, kDecodeTile));
      const int64_t bytes = range * static_cast<int64_t>(sizeof(E));
      for (int j = 0; j < n1; ++j) {
        const int64_t slot = slot_of(dq.table, dq.block_size, t1 + j);
        const char* kp = reinterpret_cast<const char*>(static_cast<const E*>(kv.k) + slot * row + dq.kv_begin * hd);
        const char* vp = reinterpret_cast<const char*>(static_cast<const E*>(kv.v) + slot * row + dq.kv_begin * hd);
        for (int64_t o = 0; o < bytes; o += 64) {
          _mm_prefetch(kp + o, _MM_HINT_T1);
          _mm_prefetch(vp + o, _MM_HINT_T1);
        }
      }
    }
    for (uint32_t h = 0; h < num_kv; ++h)
      for (uint32_t g = 0; g < dq.group; ++g) {
        const uint32_t qh = h * dq.group + g;
        tile_head<NV, E>(q + qh * hd, k_rows, v_rows, h * hd, n, dq.scale, s.m[qh], s.l[qh], s.acc + qh * hd);
      }
  }
  float* out = dq.out + static_cast<int64_t>(dq.kv_begin) * dq.group * hd;
  for (uint32_t qh = 0; qh < heads; ++qh) {
    const __m256 inv = _mm256_set1_ps(s.l[qh] > 0.0f ? 1.0f / s.l[qh] : 0.0f);
    for (int i = 0; i < 2 * NV; ++i)
      _mm256_storeu_ps(out + qh * hd + 8 * i, _mm256_mul_ps(_mm256_loadu_ps(s.acc + qh * hd + 8 * i), inv));
  }
}

template <class E>
void dispatch(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& query, DecodeScratch& s) {
  switch (shape.head_dim / 16) {
    case 1: decode<1, E>(kv, shape, query, s); break;
    case 2: decode<2, E>(kv, shape, query, s); break;
    case 3: decode<3, E>(kv, shape, query, s); break;
    case 4: decode<4, E>(kv, shape, query, s); break;
    case 5: decode<5, E>(kv, shape, query, s); break;
    case 6: decode<6, E>(kv, shape, query, s); break;
    case 7: decode<7, E>(kv, shape, query, s); break;
    case 8: decode<8, E>(kv, shape, query, s); break;
    case 16: decode<16, E>(kv, shape, query, s); break;
    default: break;  // decode_supports() said no
  }
}

}  // namespace

bool decode_supports(int head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && (head_dim <= 128 || head_dim == 256);
}

void attend_decode(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& query, DecodeScratch& s) {
  if (shape.f16) dispatch<uint16_t>(kv, shape, query, s);
  else dispatch<float>(kv, shape, query, s);
}

}  // namespace llmk::attention_cpu

#endif
