// linear_lut4's per-CPU-level kernels: a unit (64 inputs of one weight row,
// kernels/cpu/linear_lut4.hpp) decoded by table lookup, then multiplied with
// every row of a tile by linear_gguf's row-tile pass (linear_gguf_impl.hpp),
// whose AVX-512 VNNI or AVX2 choice this file follows. The int8 path meets
// linear_gguf's pair records (rounded as Q4_1's, whose integer sums carry no
// offset): 64 int8 activations (AVX-512 VNNI: + 128, unsigned) and per lane
// the f16-rounded scale of their 32.
#include <cstring>

#include "kernels/cpu/linear_gguf_impl.hpp"
#include "kernels/cpu/linear_lut4_impl.hpp"

namespace llmk::kernels::cpu::lut4 {

namespace {

// The round of int8 records, Q4_1's (offset 0 at every level).
constexpr GgufQuant kRecords = GgufQuant::q4_1;

template <Lut4Book B>
constexpr const int8_t* levels() {
  return B == Lut4Book::nf4 ? kNf4Levels : kIq4NlLevels;
}

#if defined(LLMK_GGUF_VNNI)

// Scales of a unit per lane of 16 (lanes 0-7 the first 32 inputs' four-value
// sums, 8-15 the second's) and the 64 indices, in input order.
template <bool F16>
[[gnu::always_inline]] inline __m512 unit_scales(const uint8_t* b) {
  if constexpr (F16) {
    uint32_t h;
    std::memcpy(&h, b, 4);
    const __m512 dm = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h))));
    return _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xff00, _mm512_setzero_si512(), _mm512_set1_epi32(1)), dm);
  } else {
    float s;
    std::memcpy(&s, b, 4);
    return _mm512_set1_ps(s);
  }
}
[[gnu::always_inline]] inline __m512i unit_indices(const uint8_t* b) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 4));
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(n, m4)),
                            _mm256_and_si256(_mm256_srli_epi16(n, 4), m4), 1);
}

struct UnitI8 {
  __m512i q, init;  // 64 signed weights (levels); the dot products' start
  __m512 dw;        // their scales per lane
};

// The activations are unsigned (q + 128): init = -128 (sum of each 4 levels)
// takes the 128 back out, once per unit rather than per row.
template <Lut4Book B, bool F16>
struct Int8 {
  using Unit = UnitI8;
  static constexpr int64_t kUnitBytes = kLut4UnitBytes, kActBytes = gguf::kPairActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    u.dw = unit_scales<F16>(b);
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels<B>())));
    u.q = _mm512_shuffle_epi8(table, unit_indices(b));
    const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), u.q);
    u.init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4, 7));
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m512& acc) {
    const __m512i p = _mm512_dpbusd_epi32(u.init, _mm512_loadu_si512(a), u.q);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(u.dw, _mm512_loadu_ps(a + gguf::kPairActScale)), acc);
  }
};

struct UnitF32 {
  __m512 w[4];  // the 64 weights, scaled
};

// Values by vpermps: it reads the low four bits of each index.
template <Lut4Book B, bool F16>
struct F32 {
  using Unit = UnitF32;
  static constexpr int64_t kUnitBytes = kLut4UnitBytes, kActBytes = kActUnitBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    __m512 table;
    if constexpr (B == Lut4Book::nf4) table = _mm512_loadu_ps(kNf4Values);
    else table = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlLevels))));
    const __m512 s = unit_scales<F16>(b);
    const __m512 s0 = _mm512_permutexvar_ps(_mm512_setzero_si512(), s);
    const __m512 s1 = _mm512_permutexvar_ps(_mm512_set1_epi32(8), s);
    const __m512i idx = unit_indices(b);
    // The lane index must be an immediate, unrolled or not (-O1 builds).
    const __m128i quarters[4] = {_mm512_extracti32x4_epi32(idx, 0), _mm512_extracti32x4_epi32(idx, 1),
                                 _mm512_extracti32x4_epi32(idx, 2), _mm512_extracti32x4_epi32(idx, 3)};
    LLMK_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i i32 = _mm512_cvtepu8_epi32(quarters[j]);
      u.w[j] = _mm512_mul_ps(_mm512_permutexvar_ps(i32, table), j < 2 ? s0 : s1);
    }
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m512& acc) {
    const auto* x = reinterpret_cast<const float*>(a);
    LLMK_UNROLL for (int j = 0; j < 4; ++j) acc = _mm512_fmadd_ps(u.w[j], _mm512_loadu_ps(x + 16 * j), acc);
  }
};

#elif defined(LLMK_GGUF_AVX2)

template <bool F16>
[[gnu::always_inline]] inline void unit_scales(const uint8_t* b, float* s) {
  if constexpr (F16) {
    uint16_t h[2];
    std::memcpy(h, b, 4);
    s[0] = _cvtsh_ss(h[0]);
    s[1] = _cvtsh_ss(h[1]);
  } else {
    std::memcpy(s, b, 4);
    s[1] = s[0];
  }
}

struct UnitI8 {
  __m256i q[2];  // the first and second 32 weights (levels)
  float dw[2];
};

template <Lut4Book B, bool F16>
struct Int8 {
  using Unit = UnitI8;
  static constexpr int64_t kUnitBytes = kLut4UnitBytes, kActBytes = gguf::kPairActBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    unit_scales<F16>(b, u.dw);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels<B>())));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 4));
    u.q[0] = _mm256_shuffle_epi8(table, _mm256_and_si256(n, m4));
    u.q[1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(n, 4), m4));
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m256& acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    LLMK_UNROLL for (int i = 0; i < 2; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * i));
      // |w| * (q with w's sign): both within 127, so no pair sum saturates.
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(u.q[i]), _mm256_sign_epi8(x, u.q[i]));
      const __m256 s = _mm256_mul_ps(_mm256_set1_ps(u.dw[i]), _mm256_loadu_ps(reinterpret_cast<const float*>(
          a + gguf::kPairActScale + 32 * i)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones)), s, acc);
    }
  }
};

struct UnitF32 {
  __m256 w[8];
};

// Values by two vpermps (entries 0-7, 8-15) and a blend on index bit 3.
template <Lut4Book B, bool F16>
struct F32 {
  using Unit = UnitF32;
  static constexpr int64_t kUnitBytes = kLut4UnitBytes, kActBytes = kActUnitBytes;
  [[gnu::always_inline]] static Unit load(const uint8_t* b) {
    Unit u;
    __m256 lo, hi;
    if constexpr (B == Lut4Book::nf4) {
      lo = _mm256_loadu_ps(kNf4Values);
      hi = _mm256_loadu_ps(kNf4Values + 8);
    } else {
      lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(kIq4NlLevels))));
      hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(kIq4NlLevels + 8))));
    }
    float s[2];
    unit_scales<F16>(b, s);
    alignas(32) uint8_t idx[64];
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(idx), _mm256_and_si256(n, m4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 32), _mm256_and_si256(_mm256_srli_epi16(n, 4), m4));
    LLMK_UNROLL for (int j = 0; j < 8; ++j) {
      const __m256i i32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(idx + 8 * j)));
      const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i32), _mm256_permutevar8x32_ps(hi, i32),
                                        _mm256_castsi256_ps(_mm256_slli_epi32(i32, 28)));
      u.w[j] = _mm256_mul_ps(v, _mm256_set1_ps(s[j / 4]));
    }
    return u;
  }
  [[gnu::always_inline]] static void dot(const Unit& u, const uint8_t* a, __m256& acc) {
    const auto* x = reinterpret_cast<const float*>(a);
    LLMK_UNROLL for (int j = 0; j < 8; ++j) acc = _mm256_fmadd_ps(u.w[j], _mm256_loadu_ps(x + 8 * j), acc);
  }
};

#endif

#if defined(LLMK_GGUF_VNNI) || defined(LLMK_GGUF_AVX2)
template <template <Lut4Book, bool> class T>
void pass_of(Lut4Book book, const uint8_t* act, int64_t num_rows, const Lut4Shape& s, const uint8_t* packed,
             float* y, int num_threads) {
  const int64_t units = s.num_units();
  auto run = [&](auto unit) {
    gguf::run_pass<decltype(unit)>(act, num_rows, units, packed, s.out_features, y, num_threads);
  };
  if (book == Lut4Book::nf4)
    s.f16_scales() ? run(T<Lut4Book::nf4, true>{}) : run(T<Lut4Book::nf4, false>{});
  else
    s.f16_scales() ? run(T<Lut4Book::iq4_nl, true>{}) : run(T<Lut4Book::iq4_nl, false>{});
}
#endif

}  // namespace

bool native_round(Lut4Activations a, const float* x, int64_t num_rows, const Lut4Shape& s, uint8_t* act,
                  int num_threads) {
#if defined(LLMK_GGUF_VNNI) || defined(LLMK_GGUF_AVX2)
  if (a == Lut4Activations::int8) {
    gguf::round_rows_pairs(kRecords, x, num_rows, s.in_features, act, num_threads);
    return true;
  }
  const int64_t padded = s.num_units() * 64;
  for (int64_t m = 0; m < num_rows; ++m) {
    auto* row = reinterpret_cast<float*>(act + m * s.num_units() * kActUnitBytes);
    std::memcpy(row, x + m * s.in_features, static_cast<size_t>(s.in_features) * sizeof(float));
    std::memset(row + s.in_features, 0, static_cast<size_t>(padded - s.in_features) * sizeof(float));
  }
  return true;
#else
  (void)a, (void)x, (void)num_rows, (void)s, (void)act, (void)num_threads;
  return false;
#endif
}

void native_pass(Lut4Activations a, Lut4Book book, const uint8_t* act, int64_t num_rows, const Lut4Shape& s,
                 const uint8_t* packed, float* y, int num_threads) {
#if defined(LLMK_GGUF_VNNI) || defined(LLMK_GGUF_AVX2)
  if (a == Lut4Activations::int8) pass_of<Int8>(book, act, num_rows, s, packed, y, num_threads);
  else pass_of<F32>(book, act, num_rows, s, packed, y, num_threads);
#else
  (void)a, (void)book, (void)act, (void)num_rows, (void)s, (void)packed, (void)y, (void)num_threads;
#endif
}

}  // namespace llmk::kernels::cpu::lut4
