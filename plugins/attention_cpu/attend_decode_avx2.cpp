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
#include "plugins/attention_cpu/attend_decode_driver.hpp"

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
  const float m_new = std::max(m, kernels::cpu::hmax8(_mm256_max_ps(scores[0], scores[1])));
  const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
  const __m256 mv = _mm256_set1_ps(m_new);
  const __m256 p0 = _mm256_and_ps(valid[0], kernels::cpu::exp256(_mm256_sub_ps(scores[0], mv)));
  const __m256 p1 = _mm256_and_ps(valid[1], kernels::cpu::exp256(_mm256_sub_ps(scores[1], mv)));
  l = std::fma(l, alpha, kernels::cpu::hsum8(_mm256_add_ps(p0, p1)));  // one rounding, whatever the compiler contracts
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

// Every query head of a KV-head range meets one tile, its key rows read in
// address order (decode_driver::decode_rows): the operations of tile_head
// for each head, in the same order, so the same bits.
template <int NV, class E>
void tile_rows(const decode_driver::RowsTile<E>& t, float* m, float* l, float* acc) {
  constexpr int V8 = 2 * NV;
  constexpr int64_t hd = 16 * NV;
  // Keys: part[qh * 16 + j] is query head qh's partial vector with row j;
  // rows past n stay zero (their scores are masked).
  auto* part = reinterpret_cast<__m256*>(t.part);
  for (int j = 0; j < kDecodeTile; ++j) {
    if (j >= t.n) {
      for (uint32_t qh = 0; qh < t.heads; ++qh) part[qh * kDecodeTile + j] = _mm256_setzero_ps();
      continue;
    }
    decode_driver::request_range(t.v[j], t.row_bytes);  // the values, while the keys are read
    for (uint32_t h = 0; h < t.num_kv; ++h) {
      const E* kj = t.k[j] + h * hd;
      for (uint32_t g = 0; g < t.group; ++g) {
        const uint32_t qh = h * t.group + g;
        const float* q = t.q + qh * hd;
        __m256 s = _mm256_mul_ps(_mm256_loadu_ps(q), load8(kj));
        for (int i = 1; i < V8; ++i) s = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * i), load8(kj + 8 * i), s);
        part[qh * kDecodeTile + j] = s;
      }
    }
  }
  const __m256 sv = _mm256_set1_ps(t.scale);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 valid[2] = {_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t.n), lanes)),
                           _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(t.n - 8), lanes))};
  for (uint32_t qh = 0; qh < t.heads; ++qh) {
    __m256 scores[2];
    for (int h = 0; h < 2; ++h)
      scores[h] = _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()),
                                   _mm256_mul_ps(lane_sums8(part + qh * kDecodeTile + 8 * h), sv), valid[h]);
    const float m_new = std::max(m[qh], kernels::cpu::hmax8(_mm256_max_ps(scores[0], scores[1])));
    const float alpha = std::exp(m[qh] - m_new);  // 0 on the first tile (m = -inf)
    const __m256 mv = _mm256_set1_ps(m_new);
    const __m256 p0 = _mm256_and_ps(valid[0], kernels::cpu::exp256(_mm256_sub_ps(scores[0], mv)));
    const __m256 p1 = _mm256_and_ps(valid[1], kernels::cpu::exp256(_mm256_sub_ps(scores[1], mv)));
    l[qh] = std::fma(l[qh], alpha, kernels::cpu::hsum8(_mm256_add_ps(p0, p1)));
    m[qh] = m_new;
    _mm256_store_ps(t.p + qh * kDecodeTile, p0);
    _mm256_store_ps(t.p + qh * kDecodeTile + 8, p1);
    t.alpha[qh] = alpha;
  }
  // Values, head by head over the tile's rows (requested while the keys were
  // read), in chunks of at most 8 registers as in tile_head; meanwhile the
  // next tile's keys are requested, a share per head.
  constexpr int kChunk = V8 <= 8 ? V8 : V8 % 8 == 0 ? 8 : V8 / 2;
  for (uint32_t h = 0; h < t.num_kv; ++h) {
    for (int j = decode_driver::share(t.n_next, h, t.num_kv); j < decode_driver::share(t.n_next, h + 1, t.num_kv); ++j)
      decode_driver::request_range(t.k_next[j], t.row_bytes);
    for (uint32_t g = 0; g < t.group; ++g) {
      const uint32_t qh = h * t.group + g;
      const __m256 av = _mm256_set1_ps(t.alpha[qh]);
      for (int i0 = 0; i0 < V8; i0 += kChunk) {
        float* a_at = acc + qh * hd + 8 * i0;
        __m256 a[kChunk];
        for (int i = 0; i < kChunk; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(a_at + 8 * i), av);
        for (int j = 0; j < t.n; ++j) {
          const __m256 w = _mm256_broadcast_ss(t.p + qh * kDecodeTile + j);
          const E* v = t.v[j] + h * hd + 8 * i0;
          for (int i = 0; i < kChunk; ++i) a[i] = _mm256_fmadd_ps(w, load8(v + 8 * i), a[i]);
        }
        for (int i = 0; i < kChunk; ++i) _mm256_storeu_ps(a_at + 8 * i, a[i]);
      }
    }
  }
}

template <class E>
void dispatch(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& query, DecodeScratch& s) {
  decode_driver::for_head_dim(shape.head_dim, [&](auto nv) {
    constexpr int NV = decltype(nv)::value;
    if (decode_driver::whole_rows(shape, query))
      decode_driver::decode_rows<NV, E>(kv, shape, query, s, [](auto&&... args) { tile_rows<NV, E>(args...); });
    else
      decode_driver::decode_query<NV, E>(kv, shape, query, s, [](auto&&... args) { tile_head<NV, E>(args...); });
  });
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
