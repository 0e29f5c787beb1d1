// The one home of element conversions between f32, bf16 and f16: scalar
// (inline, exact, portable; core/dtype.hpp re-exports them) and over arrays
// (vectorized where the CPU allows, the scalar code for the tails).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace llmk::kernels::cpu {

inline float bf16_to_f32(uint16_t h) noexcept {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even (as torch's .to(bfloat16)); NaN stays NaN.
inline uint16_t f32_to_bf16(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE binary16, subnormals included.
inline float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    value = man ? std::nanf("") : INFINITY;
  } else {
    const uint32_t bits = ((exp + 112u) << 23) | (man << 13);
    std::memcpy(&value, &bits, 4);
  }
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits |= sign;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Round to nearest even; beyond the largest half, infinity.
inline uint16_t f32_to_f16(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));  // subnormal
  uint32_t abits = bits & 0x7fffffffu;
  abits += 0xfffu + ((abits >> 13) & 1u);  // the mantissa to 10 bits, nearest even
  const uint32_t exp = (abits >> 23) - 112u;
  return sign | static_cast<uint16_t>((exp << 10) | ((abits >> 13) & 0x3ffu));
}

// Over contiguous arrays of n elements.
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void f32_to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace llmk::kernels::cpu
