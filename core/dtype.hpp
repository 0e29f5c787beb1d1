// Element types and conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "plugins/api/llmk_plugin.h"

namespace llmk {

enum class DType : uint32_t {
  f32 = LLMK_DTYPE_F32,
  f16 = LLMK_DTYPE_F16,
  bf16 = LLMK_DTYPE_BF16,
  i8 = LLMK_DTYPE_I8,
  u8 = LLMK_DTYPE_U8,
  i32 = LLMK_DTYPE_I32,
};

size_t dtype_size(DType t) noexcept;
const char* dtype_name(DType t) noexcept;  // "f32", "f16", ...
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"half", "bf16"/"bfloat16", ...; false if unknown.
bool parse_dtype(std::string_view s, DType& out) noexcept;

inline float bf16_to_f32(uint16_t h) noexcept {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) noexcept {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_f16(float f) noexcept;

// Converts n elements of type `from` at src into floats at dst.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);

}  // namespace llmk
