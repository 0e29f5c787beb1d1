// The K types (Q4_K, Q5_K, Q6_K): 256-value blocks used as the file stores
// them, against activations rounded as llama.cpp's Q8_K (one scale per 256
// values, partial sums per 16 or 32). Within a block every sub-block's
// integer dot product is multiplied by its integer scale, so the float work
// per block and activation row is two multiply-adds:
//   y += (d_w d_x) sum_s sc_s (q_w . q_x)_s - (dmin_w d_x) sum_s m_s sum_s(q_x)
// (Q6_K: its (q - 32) as q with m_s = sc_s and dmin_w = 32 d_w).
#include "kernels/cpu/linear_gguf_impl.hpp"

#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.hpp"

namespace llmk::kernels::cpu::gguf {

namespace {

// Where natural sub-block s (32 values) of a Q4_K / Q5_K block sits in the
// activation record: the low nibbles of 64 consecutive quant bytes are
// sub-blocks 4p and 4p+2, their high nibbles 4p+1 and 4p+3.
constexpr int64_t sub_pos(int s) { return 64 * (2 * (s / 4) + s % 2) + 32 * ((s % 4) / 2); }

// The 6-bit scales and mins of Q4_K / Q5_K (12 bytes) as 8 bytes each.
inline void unpack_scales(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  *sc = (a & 0x3f3f3f3fu) | static_cast<uint64_t>((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
  *mn = (b & 0x3f3f3f3fu) | static_cast<uint64_t>(((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)) << 32;
}

// llama.cpp's Q8_K rule: m = the value of largest magnitude (the first such),
// iscale = -127 / m, q = min(127, round-to-nearest-even(iscale * x)), d = 1 / iscale.
void round_block(GgufQuant t, const float* x, uint8_t* rec) {
  auto* q = reinterpret_cast<int8_t*>(rec);
  int16_t sums[32] = {};
  float amax = 0.0f, max = 0.0f;
#if defined(LLMK_GGUF_VNNI)
  __m512 vmax = _mm512_setzero_ps();
  for (int j = 0; j < 256; j += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
  amax = _mm512_reduce_max_ps(vmax);
  for (int j = 0; j < 256 && amax > 0.0f; j += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
    if (hit) {
      max = x[j + __builtin_ctz(hit)];
      break;
    }
  }
#elif defined(LLMK_GGUF_AVX2)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  for (int j = 0; j < 256; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  for (int j = 0; j < 256 && amax > 0.0f; j += 8) {
    const int hit = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hit) {
      max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
#else
  for (int j = 0; j < 256; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
#endif
  float d = 0.0f;
  if (amax == 0.0f) {
    std::memset(q, 0, 256);
  } else {
    const float iscale = -127.0f / max;
    d = 1.0f / iscale;
    for (int g = 0; g < 16; ++g) {  // 16 values at a time
      const int s = g / 2;
      const int64_t pos = t == GgufQuant::q6_k ? 16 * g : sub_pos(s) + 16 * (g % 2);
      int32_t sum = 0;
#if defined(LLMK_GGUF_VNNI)
      __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), _mm512_set1_ps(iscale)));
      v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + pos), _mm512_cvtepi32_epi8(v));
      sum = _mm512_reduce_add_epi32(v);
#elif defined(LLMK_GGUF_AVX2)
      const __m256 is = _mm256_set1_ps(iscale);
      const __m256i lim = _mm256_set1_epi32(127);
      const __m256i v0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g), is)), lim);
      const __m256i v1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g + 8), is)), lim);
      const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8);  // 16 int16 in order
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + pos),
                       _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(_mm256_add_epi32(v0, v1)),
                                 _mm256_extracti128_si256(_mm256_add_epi32(v0, v1), 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      sum = _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1)));
#else
      for (int l = 0; l < 16; ++l) {
        const int v = std::min(127, static_cast<int>(std::nearbyint(iscale * x[16 * g + l])));
        q[pos + l] = static_cast<int8_t>(v);
        sum += v;
      }
#endif
      sums[t == GgufQuant::q6_k ? g : s] = static_cast<int16_t>(sums[t == GgufQuant::q6_k ? g : s] + sum);
    }
  }
  std::memcpy(rec + kKActSums, sums, sizeof(sums));
  std::memcpy(rec + kKActScale, &d, 4);
}

#if defined(LLMK_GGUF_VNNI)

// A decoded block: 4 x 64 codes (u8, in the activation record's order);
// each code pair's int16 scale (vpmaddubsw's pair sums of codes below 64
// times int8 never saturate, and vpdpwssd multiplies them by the scales);
// the mins (or Q6_K's scales) as int16 against the record's sums; the
// float scales, broadcast.
struct Unit {
  __m512i q[4], sc[4], mn;
  __m512 d, dmin;
};

inline __m512i words_halves(int lo, int hi) {  // int16 lanes 0-15 = lo, 16-31 = hi
  return _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(static_cast<short>(lo)),
                                 _mm512_set1_epi16(static_cast<short>(hi)));
}
inline __m512i bytes_halves(int lo, int hi) {  // bytes 0-31 = lo, 32-63 = hi
  return _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8(static_cast<char>(lo)),
                                _mm512_set1_epi8(static_cast<char>(hi)));
}
inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Q4_K and Q5_K scales: vector i = 2p + h holds sub-blocks 4p+h, 4p+h+2.
inline void q45_scales(const uint8_t* b, Unit& u) {
  uint64_t sc, mn;
  unpack_scales(b + 4, &sc, &mn);
  const __m512i s = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(sc))));
  u.mn = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_cvtsi64_si128(static_cast<long long>(mn))));
  LLMK_UNROLL for (int i = 0; i < 4; ++i) {
    const int sub = 4 * (i / 2) + i % 2;
    u.sc[i] = _mm512_permutexvar_epi16(words_halves(sub, sub + 2), s);
  }
  u.d = _mm512_set1_ps(half(b));
  u.dmin = _mm512_set1_ps(half(b + 2));
}

inline void nibbles(const uint8_t* qs, Unit& u) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  LLMK_UNROLL for (int p = 0; p < 2; ++p) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * p);
    u.q[2 * p] = _mm512_and_si512(v, m4);
    u.q[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}

struct Q4K {
  using Unit = gguf::Unit;
  static constexpr int64_t kUnitBytes = 144, kActBytes = kKActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    q45_scales(b, u);
    nibbles(b + 16, u);
    return u;
  }
  // acc += dx (d sum_i sc_i (q . x)_i - dmin sum_s mn_s sums_s)
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m512& acc) {
    __m512i part[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // two chains of vpdpwssd
    LLMK_UNROLL for (int i = 0; i < 4; ++i)
      part[i % 2] =
          _mm512_dpwssd_epi32(part[i % 2], _mm512_maddubs_epi16(u.q[i], _mm512_loadu_si512(a + 64 * i)), u.sc[i]);
    const __m512i isum = _mm512_add_epi32(part[0], part[1]);
    const __m512i corr = _mm512_dpwssd_epi32(_mm512_setzero_si512(), u.mn, _mm512_loadu_si512(a + kKActSums));
    const __m512 t = _mm512_fmsub_ps(_mm512_cvtepi32_ps(isum), u.d, _mm512_mul_ps(_mm512_cvtepi32_ps(corr), u.dmin));
    float dx;
    std::memcpy(&dx, a + kKActScale, 4);
    acc = _mm512_fmadd_ps(t, _mm512_set1_ps(dx), acc);
  }
};

struct Q5K : Q4K {
  static constexpr int64_t kUnitBytes = 176;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    q45_scales(b, u);
    nibbles(b + 48, u);
    // The fifth bit of sub-block s's value l: bit s of qh[l].
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
    LLMK_UNROLL for (int i = 0; i < 4; ++i) {
      const int s = 4 * (i / 2) + i % 2;
      const __mmask64 k = _mm512_test_epi8_mask(qh, bytes_halves(1 << s, 1 << (s + 2)));
      u.q[i] = _mm512_mask_add_epi8(u.q[i], k, u.q[i], _mm512_set1_epi8(16));
    }
    return u;
  }
};

struct Q6K : Q4K {
  static constexpr int64_t kUnitBytes = 210;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    // Vector 2h holds values 128h + 0..63 (the low nibbles of ql[64h..]),
    // 2h + 1 values 128h + 64..127 (the high nibbles); their top bits are
    // bits 0-1, 2-3 and 4-5, 6-7 of qh[32h + l].
    const __m512i cnt_lo = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i cnt_hi = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2));
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b + 64 * h);
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
      u.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                   _mm512_sllv_epi16(_mm512_and_si512(qh, bytes_halves(0x03, 0x0c)), cnt_lo));
      u.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                       _mm512_srlv_epi16(_mm512_and_si512(qh, bytes_halves(0x30, 0xc0)), cnt_hi));
    }
    // int16 lane j of vector i: values 64i + 2j, +1, group 4i + j / 8.
    u.mn = _mm512_cvtepi8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
    const __m512i eighth = _mm512_srli_epi16(
        _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8,
                         7, 6, 5, 4, 3, 2, 1, 0),
        3);
    LLMK_UNROLL for (int i = 0; i < 4; ++i)
      u.sc[i] = _mm512_permutexvar_epi16(_mm512_add_epi16(eighth, _mm512_set1_epi16(static_cast<short>(4 * i))), u.mn);
    const float d = half(b + 208);
    u.d = _mm512_set1_ps(d);
    u.dmin = _mm512_set1_ps(32.0f * d);
    return u;
  }
};

#elif defined(LLMK_GGUF_AVX2)

// A decoded block in 32-value chunks (the activation record's order): the
// codes, each chunk's int16 scales (one per product pair, for vpmaddwd:
// vpmaddubsw's pair sums of codes below 64 times int8 never saturate), and
// the mins (or Q6_K's scales) per sum of the record.
struct Unit {
  __m256i q[8], sc[8], mn;  // mn: int16
  float d, dmin;
};

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// The sub-block (32 values) of record chunk c of a Q4_K / Q5_K block (the inverse of sub_pos).
constexpr int chunk_sub(int c) { return 4 * (c / 4) + 2 * (c % 2) + (c % 4) / 2; }

inline void q45_decode(const uint8_t* b, const uint8_t* qs, Unit& u) {
  uint64_t sc, mn;
  unpack_scales(b + 4, &sc, &mn);
  u.mn = _mm256_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn)));
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  LLMK_UNROLL for (int p = 0; p < 2; ++p) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * p));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * p + 32));
    u.q[4 * p] = _mm256_and_si256(v0, m4);
    u.q[4 * p + 1] = _mm256_and_si256(v1, m4);
    u.q[4 * p + 2] = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
    u.q[4 * p + 3] = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
  }
  LLMK_UNROLL for (int c = 0; c < 8; ++c)
    u.sc[c] = _mm256_set1_epi16(static_cast<short>((sc >> (8 * chunk_sub(c))) & 0xff));
  u.d = half(b);
  u.dmin = half(b + 2);
}

struct Q4K {
  using Unit = gguf::Unit;
  static constexpr int64_t kUnitBytes = 144, kActBytes = kKActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    q45_decode(b, b + 16, u);
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m256& acc) {
    __m256i isum = _mm256_setzero_si256();
    LLMK_UNROLL for (int c = 0; c < 8; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * c));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u.q[c], x), u.sc[c]));
    }
    const __m256i corr =
        _mm256_madd_epi16(u.mn, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + kKActSums)));
    float dx;
    std::memcpy(&dx, a + kKActScale, 4);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(u.d * dx), acc);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_set1_ps(-u.dmin * dx), acc);
  }
};

struct Q5K : Q4K {
  static constexpr int64_t kUnitBytes = 176;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    q45_decode(b, b + 48, u);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    LLMK_UNROLL for (int c = 0; c < 8; ++c) {  // sub-block s's fifth bits: bit s of qh[l]
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << chunk_sub(c)));
      const __m256i hit = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
      u.q[c] = _mm256_or_si256(u.q[c], _mm256_and_si256(hit, _mm256_set1_epi8(16)));
    }
    return u;
  }
};

struct Q6K : Q4K {
  static constexpr int64_t kUnitBytes = 210;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    LLMK_UNROLL for (int c = 0; c < 8; ++c) {  // values 32c + l = 128h + 32t + l
      const int h = c / 4, t = c % 4;
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32 * (t % 2)));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (t / 2)), m4);
      const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2), 4);
      u.q[c] = _mm256_or_si256(lo, hi);
      u.sc[c] = _mm256_set_m128i(_mm_set1_epi16(static_cast<int8_t>(b[192 + 2 * c + 1])),
                                 _mm_set1_epi16(static_cast<int8_t>(b[192 + 2 * c])));
    }
    u.mn = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    u.d = half(b + 208);
    u.dmin = 32.0f * u.d;
    return u;
  }
};

#else  // portable: the same decoded block as arrays

struct Unit {
  uint8_t q[256];  // in the activation record's order
  int32_t sc[64];  // per 4 values of q
  int32_t mn[16];  // per sum of the record
  float d, dmin;
};

struct Q4K {
  using Unit = gguf::Unit;
  static constexpr int64_t kUnitBytes = 144, kActBytes = kKActBytes;
  static Unit load(const uint8_t* b) {
    Unit u;
    scales45(b, u);
    for (int s = 0; s < 8; ++s)
      for (int l = 0; l < 32; ++l)  // value 32s + l: nibble s%2 of qs[32(s/2) + l]
        u.q[sub_pos(s) + l] = static_cast<uint8_t>((b[16 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15);
    return u;
  }
  static void scales45(const uint8_t* b, Unit& u) {
    uint64_t sc, mn;
    unpack_scales(b + 4, &sc, &mn);
    std::memset(u.mn, 0, sizeof(u.mn));
    for (int s = 0; s < 8; ++s) {
      for (int l = 0; l < 8; ++l) u.sc[sub_pos(s) / 4 + l] = static_cast<int32_t>((sc >> (8 * s)) & 0xff);
      u.mn[s] = static_cast<int32_t>((mn >> (8 * s)) & 0xff);
    }
    uint16_t h[2];
    std::memcpy(h, b, 4);
    u.d = f16_to_f32(h[0]);
    u.dmin = f16_to_f32(h[1]);
  }
  static void dot(const Unit& u, const uint8_t* a, float& acc) {
    const auto* x = reinterpret_cast<const int8_t*>(a);
    int64_t isum = 0, corr = 0;
    for (int lane = 0; lane < 64; ++lane) {
      int32_t p = 0;
      for (int e = 0; e < 4; ++e) p += u.q[4 * lane + e] * x[4 * lane + e];
      isum += static_cast<int64_t>(p) * u.sc[lane];
    }
    int16_t sums[16];
    float dx;
    std::memcpy(sums, a + kKActSums, sizeof(sums));
    std::memcpy(&dx, a + kKActScale, 4);
    for (int g = 0; g < 16; ++g) corr += static_cast<int64_t>(u.mn[g]) * sums[g];
    acc += static_cast<float>(isum) * (u.d * dx) - static_cast<float>(corr) * (u.dmin * dx);
  }
};

struct Q5K : Q4K {
  static constexpr int64_t kUnitBytes = 176;
  static Unit load(const uint8_t* b) {
    Unit u;
    scales45(b, u);
    for (int s = 0; s < 8; ++s)
      for (int l = 0; l < 32; ++l)
        u.q[sub_pos(s) + l] = static_cast<uint8_t>(((b[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15) |
                                                   (((b[16 + l] >> s) & 1) << 4));
    return u;
  }
};

struct Q6K : Q4K {
  static constexpr int64_t kUnitBytes = 210;
  static Unit load(const uint8_t* b) {
    Unit u;
    for (int v = 0; v < 256; ++v) {  // v = 128h + 32t + l
      const int h = v / 128, t = (v / 32) % 4, l = v % 32;
      const int lo = (b[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 15;
      const int hi = (b[128 + 32 * h + l] >> (2 * t)) & 3;
      u.q[v] = static_cast<uint8_t>(lo | hi << 4);
    }
    for (int g = 0; g < 16; ++g) {
      u.mn[g] = static_cast<int8_t>(b[192 + g]);
      for (int l = 0; l < 4; ++l) u.sc[4 * g + l] = u.mn[g];
    }
    uint16_t h;
    std::memcpy(&h, b + 208, 2);
    u.d = f16_to_f32(h);
    u.dmin = 32.0f * u.d;
    return u;
  }
};

#endif

}  // namespace

void round_rows_k(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, uint8_t* act, int num_threads) {
  const int64_t units = in_features / 256, n = num_rows * units;
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1 && n > 8) schedule(static)
  for (int64_t i = 0; i < n; ++i) round_block(t, x + 256 * i, act + kKActBytes * i);
}

void pass_k(GgufQuant t, const uint8_t* act, int64_t num_rows, int64_t in_features, const uint8_t* packed,
            int64_t out_features, float* y, int num_threads) {
  const int64_t units = in_features / 256;
  switch (t) {
    case GgufQuant::q4_k: run_pass<Q4K>(act, num_rows, units, packed, out_features, y, num_threads); break;
    case GgufQuant::q5_k: run_pass<Q5K>(act, num_rows, units, packed, out_features, y, num_threads); break;
    default: run_pass<Q6K>(act, num_rows, units, packed, out_features, y, num_threads); break;
  }
}

}  // namespace llmk::kernels::cpu::gguf
