// Element types and conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kernels/cpu/convert.hpp"
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

// Scalar conversions (kernels/cpu/convert.hpp is their one home).
using kernels::cpu::bf16_to_f32;
using kernels::cpu::f16_to_f32;
using kernels::cpu::f32_to_bf16;
using kernels::cpu::f32_to_f16;

// Converts n elements of type `from` at src into floats at dst.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);

}  // namespace llmk
