// The GGUF-native linear kernels' entry points, the packing, and the 32-value
// types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in pairs of blocks. The K types:
// linear_gguf_k.cpp; the pass structure: linear_gguf_impl.hpp.
//
// Activations of the 32-value types are rounded as llama.cpp's Q8_0 (and
// Q8_1 for Q4_1 / Q5_1) on x86: per 32 values, d = amax / 127, q =
// round-to-nearest-even(x * 127 / amax), d kept as f16 (Q8_1 also keeps
// f16(d * sum q), the term the weights' mins multiply).
#include "kernels/cpu/linear_gguf_impl.hpp"

#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.hpp"

namespace llmk::kernels::cpu {

namespace gguf {

namespace {

constexpr bool has_min(GgufQuant t) { return t == GgufQuant::q4_1 || t == GgufQuant::q5_1; }
constexpr bool has_high(GgufQuant t) { return t == GgufQuant::q5_0 || t == GgufQuant::q5_1; }
// The offset the kernel's integer dot products leave in: they sum
// (code - offset) * q. (The AVX2 path takes Q8_0's codes back to signed.)
constexpr int32_t weight_offset(GgufQuant t) {
#if defined(LLMK_GGUF_AVX2)
  if (t == GgufQuant::q8_0) return 0;
#endif
  return t == GgufQuant::q8_0 ? 128 : t == GgufQuant::q4_0 ? 8 : t == GgufQuant::q5_0 ? 16 : 0;
}
constexpr int64_t pair_head(GgufQuant t) { return has_min(t) ? 8 : 4; }  // the f16 scales (and mins)
constexpr int64_t pair_bytes(GgufQuant t) {
  return t == GgufQuant::q8_0 ? 68 : pair_head(t) + (has_high(t) ? 8 : 0) + 32;
}

// One file block (bytes b) as its stored values (0..255 for Q8_0 as
// stored + 128, the nibble or 5-bit code otherwise) and its f16 d and m.
void block_codes(GgufQuant t, const uint8_t* b, uint8_t* codes, uint16_t* d, uint16_t* m) {
  std::memcpy(d, b, 2);
  *m = 0;
  if (t == GgufQuant::q8_0) {
    for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(b[2 + i] ^ 0x80);
    return;
  }
  if (has_min(t)) std::memcpy(m, b + 2, 2);
  const int64_t head = has_min(t) ? 4 : 2;
  uint32_t qh = 0;
  if (has_high(t)) std::memcpy(&qh, b + head, 4);
  const uint8_t* qs = b + head + (has_high(t) ? 4 : 0);
  for (int i = 0; i < 32; ++i)
    codes[i] = static_cast<uint8_t>(((i < 16 ? qs[i] : qs[i - 16] >> 4) & 15) | (((qh >> i) & 1) << 4));
}

// A pair unit (blocks b0 and b1, b1 null past the row's end): f16 d0 d1
// [m0 m1] | Q8_0: u8 codes[64] | else [u64 fifth bits] u8 nibbles[32], byte i
// holding block 0's value i (low) and block 1's (high).
void pack_pair(GgufQuant t, const uint8_t* b0, const uint8_t* b1, uint8_t* out) {
  uint8_t codes[2][32] = {};
  uint16_t d[2] = {}, m[2] = {};
  block_codes(t, b0, codes[0], &d[0], &m[0]);
  if (b1) block_codes(t, b1, codes[1], &d[1], &m[1]);
  std::memcpy(out, d, 4);
  if (has_min(t)) std::memcpy(out + 4, m, 4);
  uint8_t* q = out + pair_head(t);
  if (t == GgufQuant::q8_0) {
    std::memcpy(q, codes, 64);
    return;
  }
  if (has_high(t)) {
    uint64_t bits = 0;
    for (int i = 0; i < 64; ++i) bits |= static_cast<uint64_t>(codes[i / 32][i % 32] >> 4) << i;
    std::memcpy(q, &bits, 8);
    q += 8;
  }
  for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>((codes[0][i] & 15) | (codes[1][i] & 15) << 4);
}

inline float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// One or two blocks of activations (n = 32 or 64 values) into a record.
void round_pair(GgufQuant t, const float* x, int64_t n, uint8_t* rec) {
  std::memset(rec, 0, kPairActBytes);
  auto* q = reinterpret_cast<int8_t*>(rec);
  int32_t init[16] = {}, sums[2] = {};
  float dx[16] = {}, ds[16] = {}, d[2] = {};
  for (int64_t b = 0; 32 * b < n; ++b) {
    const float* xb = x + 32 * b;
#if defined(LLMK_GGUF_VNNI)
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    // vcvtps2dq rounds to nearest even under the default MXCSR.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id))));
#elif defined(LLMK_GGUF_AVX2)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 xv[4], vmax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      xv[i] = _mm256_loadu_ps(xb + 8 * i);
      vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, xv[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(xv[i], id));  // nearest even
    // The packs interleave 128-bit halves: 4-value groups come out as 0 2 4 6 1 3 5 7.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#else
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; ++i) q[32 * b + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
#endif
    d[b] = amax / 127.0f;
    for (int j = 0; j < 8; ++j) dx[8 * b + j] = f16_round(d[b]);
  }
#if defined(LLMK_GGUF_VNNI)
  // Stored as q + 128 (see PairUnit); init stays zero.
  const __m512i qs = _mm512_loadu_si512(q);
  const __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), qs);
  _mm512_storeu_si512(q, _mm512_xor_si512(qs, _mm512_set1_epi8(static_cast<char>(0x80))));
  sums[0] = _mm512_mask_reduce_add_epi32(0x00ff, lanes);
  sums[1] = _mm512_mask_reduce_add_epi32(0xff00, lanes);
#else
  for (int j = 0; j < 16; ++j) {
    const int32_t lane = q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3];
    init[j] = -weight_offset(t) * lane;
    sums[j / 8] += lane;
  }
#endif
  if (has_min(t))
    for (int b = 0; b < 2; ++b) ds[8 * b] = f16_round(d[b] * static_cast<float>(sums[b]));
  std::memcpy(rec + kPairActInit, init, sizeof(init));
  std::memcpy(rec + kPairActScale, dx, sizeof(dx));
  std::memcpy(rec + kPairActSum, ds, sizeof(ds));
}

#if defined(LLMK_GGUF_VNNI)

// The activations are unsigned here (q + 128, vpdpbusd's first operand) and
// the weights signed (code - offset): init = -128 (sum of each 4 weights)
// takes the 128 back out, once per unit rather than per activation row.
struct PairUnit {
  __m512i q, init;  // 64 signed weights; the dot products' start
  __m512 dw, mw;    // lanes 0-7: block 0's d (m), 8-15: block 1's
};

template <GgufQuant T>
struct Pair {
  using Unit = PairUnit;
  static constexpr int64_t kUnitBytes = pair_bytes(T), kActBytes = kPairActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    const __m512i halves = _mm512_mask_blend_epi32(0xff00, _mm512_setzero_si512(), _mm512_set1_epi32(1));
    int64_t scales = 0;  // f16 d0 d1 [m0 m1]
    std::memcpy(&scales, b, has_min(T) ? 8 : 4);
    const __m128i h = _mm_cvtsi64_si128(scales);
    const __m512 dm = _mm512_castps128_ps512(_mm_cvtph_ps(h));
    u.dw = _mm512_permutexvar_ps(halves, dm);
    if constexpr (has_min(T)) u.mw = _mm512_permutexvar_ps(_mm512_add_epi32(halves, _mm512_set1_epi32(2)), dm);
    if constexpr (T == GgufQuant::q8_0) {
      u.q = _mm512_loadu_si512(b + 4);
    } else {
      const __m256i m4 = _mm256_set1_epi8(0x0f);
      const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kUnitBytes - 32));
      u.q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(n, m4)),
                               _mm256_and_si256(_mm256_srli_epi16(n, 4), m4), 1);
      if constexpr (has_high(T)) {
        uint64_t bits;
        std::memcpy(&bits, b + pair_head(T), 8);
        u.q = _mm512_mask_add_epi8(u.q, _cvtu64_mask64(bits), u.q, _mm512_set1_epi8(16));
      }
    }
    u.q = _mm512_sub_epi8(u.q, _mm512_set1_epi8(static_cast<char>(weight_offset(T))));
    const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), u.q);
    u.init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4, 7));
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m512& acc) {
    const __m512i p = _mm512_dpbusd_epi32(u.init, _mm512_loadu_si512(a), u.q);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(u.dw, _mm512_loadu_ps(a + kPairActScale)), acc);
    if constexpr (has_min(T)) acc = _mm512_fmadd_ps(u.mw, _mm512_loadu_ps(a + kPairActSum), acc);
  }
};

#elif defined(LLMK_GGUF_AVX2)

struct PairUnit {
  __m256i q[2];  // block 0's and block 1's codes (Q8_0: the signed values)
  float dw[2], mw[2];
};

template <GgufQuant T>
struct Pair {
  using Unit = PairUnit;
  static constexpr int64_t kUnitBytes = pair_bytes(T), kActBytes = kPairActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    uint16_t h[4] = {};
    std::memcpy(h, b, has_min(T) ? 8 : 4);
    LLMK_UNROLL for (int i = 0; i < 2; ++i) {
      u.dw[i] = _cvtsh_ss(h[i]);
      u.mw[i] = _cvtsh_ss(h[2 + i]);
    }
    if constexpr (T == GgufQuant::q8_0) {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      LLMK_UNROLL for (int i = 0; i < 2; ++i)
        u.q[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 4 + 32 * i)), flip);
    } else {
      const __m256i m4 = _mm256_set1_epi8(0x0f);
      const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kUnitBytes - 32));
      u.q[0] = _mm256_and_si256(n, m4);
      u.q[1] = _mm256_and_si256(_mm256_srli_epi16(n, 4), m4);
      if constexpr (has_high(T)) {
        // Byte l of block i gets bit l of its 32 fifth bits: each 128-bit
        // half takes its two bytes of them, then one bit per byte.
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                                2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
        LLMK_UNROLL for (int i = 0; i < 2; ++i) {
          uint32_t bits;
          std::memcpy(&bits, b + pair_head(T) + 4 * i, 4);
          const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
          const __m256i hit = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
          u.q[i] = _mm256_or_si256(u.q[i], _mm256_and_si256(hit, _mm256_set1_epi8(16)));
        }
      }
    }
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m256& acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    LLMK_UNROLL for (int i = 0; i < 2; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * i));
      __m256i pairs;
      if constexpr (T == GgufQuant::q8_0)  // |w| * (q with w's sign): both factors within 128, no saturation
        pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(u.q[i]), _mm256_sign_epi8(x, u.q[i]));
      else
        pairs = _mm256_maddubs_epi16(u.q[i], x);
      const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(a + kPairActInit + 32 * i)));
      const __m256 s = _mm256_mul_ps(_mm256_set1_ps(u.dw[i]), _mm256_loadu_ps(reinterpret_cast<const float*>(
          a + kPairActScale + 32 * i)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
      if constexpr (has_min(T))
        acc = _mm256_fmadd_ps(_mm256_set1_ps(u.mw[i]),
                              _mm256_loadu_ps(reinterpret_cast<const float*>(a + kPairActSum + 32 * i)), acc);
    }
  }
};

#else

struct PairUnit {
  uint8_t q[64];
  float dw[2], mw[2];
};

template <GgufQuant T>
struct Pair {
  using Unit = PairUnit;
  static constexpr int64_t kUnitBytes = pair_bytes(T), kActBytes = kPairActBytes;
  static Unit load(const uint8_t* b) {
    Unit u;
    uint16_t h[4] = {};
    std::memcpy(h, b, has_min(T) ? 8 : 4);
    for (int i = 0; i < 2; ++i) {
      u.dw[i] = f16_to_f32(h[i]);
      u.mw[i] = f16_to_f32(h[2 + i]);
    }
    if constexpr (T == GgufQuant::q8_0) {
      std::memcpy(u.q, b + 4, 64);
    } else {
      uint64_t bits = 0;
      if constexpr (has_high(T)) std::memcpy(&bits, b + pair_head(T), 8);
      const uint8_t* n = b + kUnitBytes - 32;
      for (int i = 0; i < 32; ++i) {
        u.q[i] = static_cast<uint8_t>((n[i] & 15) | ((bits >> i) & 1) << 4);
        u.q[32 + i] = static_cast<uint8_t>((n[i] >> 4) | ((bits >> (32 + i)) & 1) << 4);
      }
    }
    return u;
  }
  static void dot(const Unit& u, const uint8_t* a, float& acc) {
    const auto* x = reinterpret_cast<const int8_t*>(a);
    int32_t init[16];
    float dx[16], ds[16];
    std::memcpy(init, a + kPairActInit, sizeof(init));
    std::memcpy(dx, a + kPairActScale, sizeof(dx));
    std::memcpy(ds, a + kPairActSum, sizeof(ds));
    for (int lane = 0; lane < 16; ++lane) {
      int32_t p = init[lane];
      for (int e = 0; e < 4; ++e) p += u.q[4 * lane + e] * x[4 * lane + e];
      acc += static_cast<float>(p) * (u.dw[lane / 8] * dx[lane]);
    }
    if constexpr (has_min(T)) acc += u.mw[0] * ds[0] + u.mw[1] * ds[8];
  }
};

#endif

}  // namespace

size_t unit_bytes(GgufQuant t) {
  return is_k_type(t) ? gguf_block_bytes(t) : static_cast<size_t>(pair_bytes(t));
}

void round_rows_pairs(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, uint8_t* act,
                      int num_threads) {
  const int64_t units = num_units(t, in_features), n = num_rows * units;
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1 && n > 32) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / units, u = i % units;
    round_pair(t, x + r * in_features + 64 * u, std::min<int64_t>(64, in_features - 64 * u), act + kPairActBytes * i);
  }
}

void pass_pairs(GgufQuant t, const uint8_t* act, int64_t num_rows, int64_t in_features, const uint8_t* packed,
                int64_t out_features, float* y, int num_threads) {
  const int64_t units = num_units(t, in_features);
  auto run = [&](auto type) {
    run_pass<Pair<decltype(type)::value>>(act, num_rows, units, packed, out_features, y, num_threads);
  };
  switch (t) {
    case GgufQuant::q4_0: run(std::integral_constant<GgufQuant, GgufQuant::q4_0>{}); break;
    case GgufQuant::q4_1: run(std::integral_constant<GgufQuant, GgufQuant::q4_1>{}); break;
    case GgufQuant::q5_0: run(std::integral_constant<GgufQuant, GgufQuant::q5_0>{}); break;
    case GgufQuant::q5_1: run(std::integral_constant<GgufQuant, GgufQuant::q5_1>{}); break;
    default: run(std::integral_constant<GgufQuant, GgufQuant::q8_0>{}); break;
  }
}

}  // namespace gguf

bool gguf_quant_supported(uint32_t ggml_type) noexcept {
  switch (static_cast<GgufQuant>(ggml_type)) {
    case GgufQuant::q4_0:
    case GgufQuant::q4_1:
    case GgufQuant::q5_0:
    case GgufQuant::q5_1:
    case GgufQuant::q8_0:
    case GgufQuant::q4_k:
    case GgufQuant::q5_k:
    case GgufQuant::q6_k: return true;
  }
  return false;
}

int64_t gguf_block_elems(GgufQuant t) noexcept { return gguf::is_k_type(t) ? 256 : 32; }

size_t gguf_block_bytes(GgufQuant t) noexcept {
  switch (t) {
    case GgufQuant::q4_0: return 18;
    case GgufQuant::q4_1: return 20;
    case GgufQuant::q5_0: return 22;
    case GgufQuant::q5_1: return 24;
    case GgufQuant::q8_0: return 34;
    case GgufQuant::q4_k: return 144;
    case GgufQuant::q5_k: return 176;
    case GgufQuant::q6_k: return 210;
  }
  return 0;
}

size_t gguf_packed_size(GgufQuant t, int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(out_features * gguf::num_units(t, in_features)) * gguf::unit_bytes(t);
}

void gguf_pack(GgufQuant t, const void* blocks, int64_t out_features, int64_t in_features, void* packed,
               int num_threads) {
  const auto* src = static_cast<const uint8_t*>(blocks);
  auto* dst = static_cast<uint8_t*>(packed);
  if (gguf::is_k_type(t)) {  // the K blocks are used as stored
    std::memcpy(dst, src, gguf_packed_size(t, out_features, in_features));
    return;
  }
  const int64_t nb = in_features / 32, units = gguf::num_units(t, in_features);
  const size_t bb = gguf_block_bytes(t), ub = gguf::unit_bytes(t);
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t n = 0; n < out_features; ++n)
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* b0 = src + (n * nb + 2 * u) * bb;
      gguf::pack_pair(t, b0, 2 * u + 1 < nb ? b0 + bb : nullptr, dst + (n * units + u) * ub);
    }
}

size_t gguf_scratch_size(GgufQuant t, int64_t max_rows, int64_t in_features) {
  return static_cast<size_t>(max_rows * gguf::act_row_bytes(t, in_features));
}

void linear_gguf(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, const void* packed,
                 int64_t out_features, float* y, void* scratch, int num_threads) {
  if (num_rows <= 0 || out_features <= 0) return;
  auto* act = static_cast<uint8_t*>(scratch);  // [num_rows][units] records
  const auto* w = static_cast<const uint8_t*>(packed);
  if (gguf::is_k_type(t)) {
    gguf::round_rows_k(t, x, num_rows, in_features, act, num_threads);
    gguf::pass_k(t, act, num_rows, in_features, w, out_features, y, num_threads);
  } else {
    gguf::round_rows_pairs(t, x, num_rows, in_features, act, num_threads);
    gguf::pass_pairs(t, act, num_rows, in_features, w, out_features, y, num_threads);
  }
}

}  // namespace llmk::kernels::cpu
