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

template <class E>
void dispatch(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& query, DecodeScratch& s) {
  decode_driver::for_head_dim(shape.head_dim, [&](auto nv) {
    constexpr int NV = decltype(nv)::value;
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
