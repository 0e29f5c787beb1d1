// GGUF's element types (ggml's type ids) and their block layouts, and the
// decoders that turn stored blocks into floats.
//
// A quantized type stores a row of `block_size` values as one block of
// `type_size` bytes; a row's length (the innermost dimension) is a whole
// number of blocks. Layouts, little-endian, f16 = IEEE half:
//   Q8_0 (32 values, 34 bytes): f16 d; int8 q[32].            x = d * q
//   Q4_0 (32 values, 18 bytes): f16 d; u8 qs[16]; value j < 16 is the low
//        nibble of qs[j], value j + 16 the high nibble.        x = d * (nib - 8)
//   Q4_K (256 values, 144 bytes): f16 d; f16 dmin; u8 scales[12]; u8 qs[128].
//        8 sub-blocks of 32 with 6-bit scale sc and min m packed in scales;
//        each 32 bytes of qs hold two sub-blocks (low nibbles, then high).
//                                                           x = d*sc*nib - dmin*m
//   Q6_K (256 values, 210 bytes): u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d.
//        6-bit q = 4 low bits from ql, 2 high bits from qh; 16 groups of 16
//        values, each with its own int8 scale.              x = d*scale*(q - 32)
#pragma once

#include <cstdint>

namespace llmk {

enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};

struct GgmlTypeInfo {
  const char* name;     // as llama.cpp spells it: "F32", "Q4_K", ...
  uint32_t block_size;  // values per block (1 for plain types)
  uint32_t type_size;   // bytes per block
  bool can_dequantize;  // dequantize_ggml() decodes it
};

// nullptr for an id this reader does not know (its byte size is unknown,
// so such a file cannot even be validated).
const GgmlTypeInfo* ggml_type_info(uint32_t type) noexcept;
// "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K": the types dequantize_ggml decodes.
const char* ggml_dequantizable_type_names() noexcept;

// Decodes `num_values` values (a whole number of blocks) of `type` at src
// into dst. src: num_values / block_size blocks of type_size bytes, any
// alignment; dst: [num_values] floats. Throws Error(unsupported) for a type
// whose can_dequantize is false, Error(invalid_argument) when num_values is
// not a multiple of the block size.
void dequantize_ggml(GgmlType type, const void* src, float* dst, int64_t num_values);

}  // namespace llmk
