// Element types and conversions between them.
//
// Besides the plain element types, a DType may name ggml's quantized blocks
// (a GGUF file's tensor types, kept as the file stores them): the value is
// LLMK_DTYPE_GGML_BASE + the ggml type id (core/gguf_types.hpp), as the
// plugin ABI spells it. Such a tensor's rows are a whole number of blocks;
// its bytes come from dtype_bytes, not from an element size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kernels/cpu/convert.hpp"
#include "plugins/api/llmk_linear.h"

namespace llmk {

enum class DType : uint32_t {
  f32 = LLMK_DTYPE_F32,
  f16 = LLMK_DTYPE_F16,
  bf16 = LLMK_DTYPE_BF16,
  i8 = LLMK_DTYPE_I8,
  u8 = LLMK_DTYPE_U8,
  i32 = LLMK_DTYPE_I32,
  // A GPTQ/AWQ checkpoint's quantized weight: data is an
  // llmk_linear_int_groups (core/int_groups.hpp), not the values.
  int4_groups = LLMK_DTYPE_INT4_GROUPS,
  int8_groups = LLMK_DTYPE_INT8_GROUPS,
};

// Bytes per element of a plain type; 0 for ggml blocks (use dtype_bytes).
size_t dtype_size(DType t) noexcept;
const char* dtype_name(DType t) noexcept;  // "f32", "f16", ...; ggml blocks by ggml's name ("Q4_K")

// ggml blocks: whether t names them, the DType of a ggml type id, and back.
constexpr bool is_ggml_dtype(DType t) noexcept { return static_cast<uint32_t>(t) >= LLMK_DTYPE_GGML_BASE; }
constexpr DType ggml_dtype(uint32_t ggml_type) noexcept { return static_cast<DType>(LLMK_DTYPE_GGML_BASE + ggml_type); }
constexpr uint32_t ggml_type_of(DType t) noexcept { return static_cast<uint32_t>(t) - LLMK_DTYPE_GGML_BASE; }
constexpr bool is_int_groups_dtype(DType t) noexcept { return t == DType::int4_groups || t == DType::int8_groups; }
// Bytes of numel values stored as t (for ggml blocks numel is a whole
// number of blocks; int groups count their integers only), and the mean
// bytes per value (0.5625 for Q4_K).
size_t dtype_bytes(DType t, int64_t numel) noexcept;
double dtype_bytes_per_value(DType t) noexcept;
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"half", "bf16"/"bfloat16", ...; false if unknown.
bool parse_dtype(std::string_view s, DType& out) noexcept;

// Scalar conversions (kernels/cpu/convert.hpp is their one home).
using kernels::cpu::bf16_to_f32;
using kernels::cpu::f16_to_f32;
using kernels::cpu::f32_to_bf16;
using kernels::cpu::f32_to_f16;

// Converts n elements of type `from` at src into floats at dst (ggml blocks
// are decoded by dequantize_ggml, core/gguf_types.hpp).
void convert_to_f32(DType from, const void* src, float* dst, size_t n);

}  // namespace llmk
