#include "core/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace llmk {

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType& out) noexcept {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "f32" || l == "float32" || l == "float") out = DType::f32;
  else if (l == "f16" || l == "float16" || l == "half" || l == "fp16") out = DType::f16;
  else if (l == "bf16" || l == "bfloat16") out = DType::bf16;
  else if (l == "i8" || l == "int8") out = DType::i8;
  else if (l == "u8" || l == "uint8") out = DType::u8;
  else if (l == "i32" || l == "int32") out = DType::i32;
  else return false;
  return true;
}

float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    value = man ? std::nanf("") : INFINITY;
  } else {
    uint32_t bits = ((exp + 112u) << 23) | (man << 13);
    std::memcpy(&value, &bits, 4);
  }
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits |= sign;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t f32_to_f16(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // overflow to infinity
  if (a < 6.103515625e-05f) {                // subnormal: multiples of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t abits = bits & 0x7fffffffu;
  // Round mantissa to 10 bits, nearest even.
  abits += 0xfffu + ((abits >> 13) & 1u);
  const uint32_t exp = (abits >> 23) - 112u;
  return sign | static_cast<uint16_t>((exp << 10) | ((abits >> 13) & 0x3ffu));
}

void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
  switch (from) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::f16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default:
      throw std::invalid_argument(std::string("convert_to_f32: unsupported source dtype ") + dtype_name(from));
  }
}

}  // namespace llmk
