#include "plugins/attention_cpu/attend_decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/kv_quant.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "plugins/attention_cpu/attend_decode_driver.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmk::attention_cpu {

DecodeScratchSize decode_scratch_size(const KvShape& shape, uint32_t num_heads) {
  DecodeScratchSize size;
  size.per_head = num_heads;
  size.acc = static_cast<size_t>(num_heads) * shape.head_dim;
  if (shape.int8) size.tile = static_cast<size_t>(kDecodeTile) * shape.num_kv_heads * shape.head_dim;
  else {  // whole-row tiles (attend_decode_driver.hpp, RowsTile)
    size.part = static_cast<size_t>(num_heads) * kDecodeTile * 16;
    size.p = static_cast<size_t>(num_heads) * kDecodeTile;
  }
  return size;
}

void merge_decode_spans(const float* spans, int num_spans, uint32_t num_heads, uint32_t head_dim, float* out) {
  const size_t stride = decode_span_floats(num_heads, head_dim);
  for (uint32_t h = 0; h < num_heads; ++h) {
    float m = -std::numeric_limits<float>::infinity();
    for (int s = 0; s < num_spans; ++s) m = std::max(m, spans[s * stride + h]);
    float* o = out + static_cast<size_t>(h) * head_dim;
    std::fill_n(o, head_dim, 0.0f);
    if (m == -std::numeric_limits<float>::infinity()) continue;  // no visible key (a decode always sees itself)
    float l = 0.0f;
    for (int s = 0; s < num_spans; ++s) {
      const float* span = spans + s * stride;
      const float w = std::exp(span[h] - m);  // 0 for a span that saw no key (m = -inf, acc = 0)
      l += w * span[num_heads + h];
      const float* acc = span + 2 * num_heads + static_cast<size_t>(h) * head_dim;
      for (uint32_t i = 0; i < head_dim; ++i) o[i] += w * acc[i];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (uint32_t i = 0; i < head_dim; ++i) o[i] *= inv;
  }
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
  l = std::fma(l, alpha, _mm512_reduce_add_ps(p));  // one rounding, whatever the compiler contracts
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

// Every query head of a KV-head range meets one tile of up to 16 positions,
// the tile's key rows read in address order (decode_driver::decode_rows):
// each row's keys for every head of the range, then each head's
// online-softmax update, then each head's values. The same operations in the
// same order as tile_head for each head, so the same bits.
template <int NV, class E>
void tile_rows(const decode_driver::RowsTile<E>& t, float* m, float* l, float* acc) {
  constexpr int64_t hd = 16 * NV;
  // Keys: part[qh * 16 + j] is query head qh's partial dot-product vector
  // with row j; rows past n stay zero (their scores are masked).
  auto* part = reinterpret_cast<__m512*>(t.part);
  for (int j = 0; j < kDecodeTile; ++j) {
    if (j >= t.n) {
      for (uint32_t qh = 0; qh < t.heads; ++qh) part[qh * kDecodeTile + j] = _mm512_setzero_ps();
      continue;
    }
    const E* row = t.k[j];
    decode_driver::request_range(t.v[j], t.row_bytes);  // the values, while the keys are read
    for (uint32_t h = 0; h < t.num_kv; ++h) {
      __m512 kv[NV];
      for (int i = 0; i < NV; ++i) kv[i] = load16(row + h * hd + 16 * i);
      for (uint32_t g = 0; g < t.group; ++g) {
        const uint32_t qh = h * t.group + g;
        const float* q = t.q + qh * hd;
        __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q), kv[0]);
        for (int i = 1; i < NV; ++i) s = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * i), kv[i], s);
        part[qh * kDecodeTile + j] = s;
      }
    }
  }
  // Each head's softmax update: its weights p and its accumulators'
  // correction alpha.
  const auto valid = static_cast<__mmask16>(t.n >= kDecodeTile ? 0xffffu : (1u << t.n) - 1u);
  for (uint32_t qh = 0; qh < t.heads; ++qh) {
    const __m512 scores = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid,
                                             _mm512_mul_ps(lane_sums16(part + qh * kDecodeTile), _mm512_set1_ps(t.scale)));
    const float m_new = std::max(m[qh], _mm512_reduce_max_ps(scores));
    const float alpha = std::exp(m[qh] - m_new);  // 0 on the first tile (m = -inf)
    const __m512 p = _mm512_maskz_mov_ps(valid, kernels::cpu::exp512(_mm512_sub_ps(scores, _mm512_set1_ps(m_new))));
    l[qh] = std::fma(l[qh], alpha, _mm512_reduce_add_ps(p));
    m[qh] = m_new;
    _mm512_store_ps(t.p + qh * kDecodeTile, p);
    t.alpha[qh] = alpha;
  }
  // Values, head by head over the tile's rows (requested while the keys were
  // read, so read from cache in any order), accumulators in registers as in
  // tile_head; meanwhile the next tile's keys are requested, a share per head.
  for (uint32_t h = 0; h < t.num_kv; ++h) {
    for (int j = decode_driver::share(t.n_next, h, t.num_kv); j < decode_driver::share(t.n_next, h + 1, t.num_kv); ++j)
      decode_driver::request_range(t.k_next[j], t.row_bytes);
    for (uint32_t g = 0; g < t.group; ++g) {
      const uint32_t qh = h * t.group + g;
      float* a_at = acc + qh * hd;
      const __m512 av = _mm512_set1_ps(t.alpha[qh]);
      __m512 a[NV];
      for (int i = 0; i < NV; ++i) a[i] = _mm512_mul_ps(_mm512_loadu_ps(a_at + 16 * i), av);
      for (int j = 0; j < t.n; ++j) {
        const __m512 w = _mm512_set1_ps(t.p[qh * kDecodeTile + j]);
        const E* v = t.v[j] + h * hd;
        for (int i = 0; i < NV; ++i) a[i] = _mm512_fmadd_ps(w, load16(v + 16 * i), a[i]);
      }
      for (int i = 0; i < NV; ++i) _mm512_storeu_ps(a_at + 16 * i, a[i]);
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

#elif !(defined(__AVX2__) && defined(__FMA__))  // AVX2 + FMA: attend_decode_avx2.cpp; others use the row-by-row kernel

bool decode_supports(int) { return false; }

void attend_decode(const llmk_kv_layer&, const KvShape&, const DecodeQuery&, DecodeScratch&) {}

#endif

}  // namespace llmk::attention_cpu
