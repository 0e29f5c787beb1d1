#include "kernels/cpu/convert.hpp"

#include <cmath>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace llmk::kernels::cpu {

namespace {

inline float bf16_scalar(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t to_bf16_scalar(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE half <-> float without F16C, for the tails and non-x86 builds.
inline float f16_scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant ? NAN : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= sign;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = bf16_scalar(src[i]);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_scalar(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512BF16__)
  for (; i + 16 <= n; i += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    std::memcpy(dst + i, &b, 32);
  }
#endif
  for (; i < n; ++i) dst[i] = to_bf16_scalar(src[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) {
#if defined(__F16C__)
    dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
#else
    // Slow path outside x86: round through the nearest representable half by search-free arithmetic.
    const float a = std::fabs(src[i]);
    uint16_t sign = std::signbit(src[i]) ? 0x8000u : 0u;
    uint16_t h;
    if (std::isnan(src[i])) h = 0x7e00u;
    else if (a >= 65520.0f) h = 0x7c00u;
    else if (a < 6.103515625e-05f) h = static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
    else {
      int e;
      const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
      uint32_t mant = static_cast<uint32_t>(std::nearbyint(m * 2048.0f));  // 11 bits with the implicit one
      if (mant == 2048u) { mant = 1024u; ++e; }
      h = static_cast<uint16_t>(((e + 14) << 10) | (mant & 0x3ffu));
    }
    dst[i] = static_cast<uint16_t>(sign | h);
#endif
  }
}

}  // namespace llmk::kernels::cpu
