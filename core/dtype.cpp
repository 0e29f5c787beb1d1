#include "core/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "core/gguf_types.hpp"
#include "core/int_groups.hpp"

namespace llmk {

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::int4_groups:
    case DType::int8_groups: return 0;
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
    case DType::int4_groups: return "int4_groups";
    case DType::int8_groups: return "int8_groups";
  }
  if (is_ggml_dtype(t)) {
    const GgmlTypeInfo* info = ggml_type_info(ggml_type_of(t));
    if (info != nullptr) return info->name;
  }
  return "?";
}

size_t dtype_bytes(DType t, int64_t numel) noexcept {
  if (t == DType::int4_groups) return static_cast<size_t>(numel) / 2;
  if (t == DType::int8_groups) return static_cast<size_t>(numel);
  if (!is_ggml_dtype(t)) return static_cast<size_t>(numel) * dtype_size(t);
  const GgmlTypeInfo* info = ggml_type_info(ggml_type_of(t));
  if (info == nullptr) return 0;
  return static_cast<size_t>(numel) / info->block_size * info->type_size;
}

double dtype_bytes_per_value(DType t) noexcept {
  if (is_int_groups_dtype(t)) return t == DType::int4_groups ? 0.5 : 1.0;
  if (!is_ggml_dtype(t)) return static_cast<double>(dtype_size(t));
  const GgmlTypeInfo* info = ggml_type_info(ggml_type_of(t));
  return info == nullptr ? 0.0 : static_cast<double>(info->type_size) / info->block_size;
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
    case DType::int4_groups:
    case DType::int8_groups:
      dequantize_int_groups(*static_cast<const llmk_linear_int_groups*>(src), dst);
      return;
    default:
      if (is_ggml_dtype(from)) {
        dequantize_ggml(static_cast<GgmlType>(ggml_type_of(from)), src, dst, static_cast<int64_t>(n));
        return;
      }
      throw std::invalid_argument(std::string("convert_to_f32: unsupported source dtype ") + dtype_name(from));
  }
}

}  // namespace llmk
