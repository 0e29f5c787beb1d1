#include "plugins/attention_cpu/attend_decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/vec_math.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmk::attention_cpu {

DecodeScratchSize decode_scratch_size(const KvShape& shape, uint32_t num_heads) {
  DecodeScratchSize size;
  size.per_head = num_heads;
  size.acc = static_cast<size_t>(num_heads) * shape.head_dim;
  if (shape.int8) size.tile = static_cast<size_t>(kDecodeTile) * shape.num_kv_heads * shape.head_dim;
  return size;
}

#if defined(__AVX512F__)

namespace {

// Lane i < 8: a[2i] + a[2i + 1]; lane 8 + i: b[2i] + b[2i + 1].
inline __m512 pair_sums(__m512 a, __m512 b) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
}

// Lane j of the result: the sum of the 16 lanes of p[j]. Four rounds of
// pair sums; after round r each vector holds 16 / 2^r partial sums of
// 2^r inputs, in input order.
inline __m512 lane_sums16(const __m512* p) {
  __m512 c[8], d[4];
  for (int i = 0; i < 8; ++i) c[i] = pair_sums(p[2 * i], p[2 * i + 1]);
  for (int i = 0; i < 4; ++i) d[i] = pair_sums(c[2 * i], c[2 * i + 1]);
  return pair_sums(pair_sums(d[0], d[1]), pair_sums(d[2], d[3]));
}

// 16 cached values as floats: F32 as stored, F16 widened.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// One query head meets one tile of up to 16 positions (k[j] + off, v[j] + off
// for j < n; entries past n must still point at readable rows).
template <int NV, class E>
inline void tile_head(const float* q, const E* const* k, const E* const* v, int64_t off, int n, float scale,
                      float& m, float& l, float* acc) {
  __m512 qv[NV];
  for (int i = 0; i < NV; ++i) qv[i] = _mm512_loadu_ps(q + 16 * i);
  __m512 part[kDecodeTile];
  for (int j = 0; j < kDecodeTile; ++j) {
    const E* kj = k[j] + off;
    __m512 s = _mm512_mul_ps(qv[0], load16(kj));
    for (int i = 1; i < NV; ++i) s = _mm512_fmadd_ps(qv[i], load16(kj + 16 * i), s);
    part[j] = s;
  }
  const auto valid = static_cast<__mmask16>(n >= kDecodeTile ? 0xffffu : (1u << n) - 1u);
  const __m512 scores = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid,
                                           _mm512_mul_ps(lane_sums16(part), _mm512_set1_ps(scale)));
  const float m_new = std::max(m, _mm512_reduce_max_ps(scores));
  const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
  const __m512 p = _mm512_maskz_mov_ps(valid, kernels::cpu::exp512(_mm512_sub_ps(scores, _mm512_set1_ps(m_new))));
  l = l * alpha + _mm512_reduce_add_ps(p);
  m = m_new;
  alignas(64) float pj[kDecodeTile];
  _mm512_store_ps(pj, p);
  __m512 a[NV];
  const __m512 av = _mm512_set1_ps(alpha);
  for (int i = 0; i < NV; ++i) a[i] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * i), av);
  for (int j = 0; j < n; ++j) {
    const __m512 w = _mm512_set1_ps(pj[j]);
    const E* vj = v[j] + off;
    for (int i = 0; i < NV; ++i) a[i] = _mm512_fmadd_ps(w, load16(vj + 16 * i), a[i]);
  }
  for (int i = 0; i < NV; ++i) _mm512_storeu_ps(acc + 16 * i, a[i]);
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

  // The next tile's rows are requested while this one computes, when they
  // are few enough to sit in L2 beside it (measured: 1.5x on F16 rows of
  // 12 heads, nothing or worse on F32 rows twice that size, which the
  // hardware prefetcher already streams at ~80% of the bandwidth).
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
    const __m512 inv = _mm512_set1_ps(s.l[qh] > 0.0f ? 1.0f / s.l[qh] : 0.0f);
    for (int i = 0; i < NV; ++i)
      _mm512_storeu_ps(out + qh * hd + 16 * i, _mm512_mul_ps(_mm512_loadu_ps(s.acc + qh * hd + 16 * i), inv));
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

#elif !(defined(__AVX2__) && defined(__FMA__))  // AVX2 + FMA: attend_decode_avx2.cpp; others use the row-by-row kernel

bool decode_supports(int) { return false; }

void attend_decode(const llmk_kv_layer&, const KvShape&, const DecodeQuery&, DecodeScratch&) {}

#endif

}  // namespace llmk::attention_cpu
