// GGUF's element types (ggml's type ids), their block layouts, and
// dequantize_ggml, which turns stored blocks into floats.
//
// A quantized type stores a run of `block_size` values as one block of
// `type_size` bytes; a row's length (the innermost dimension) is a whole
// number of blocks. Every id ggml has assigned is known here with its sizes
// (ids 31-33 and 36-38 are ggml's retired repacked Q4_0 / IQ4_NL layouts,
// which files no longer hold), so any file is validated by size even where
// its type cannot be decoded. The block layouts of the decoded types are
// described beside their decoders (core/gguf_blocks.hpp).
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
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  q4_0_4_4 = 31,  // retired: repacked Q4_0
  q4_0_4_8 = 32,
  q4_0_8_8 = 33,
  tq1_0 = 34,
  tq2_0 = 35,
  iq4_nl_4_4 = 36,  // retired: repacked IQ4_NL
  iq4_nl_4_8 = 37,
  iq4_nl_8_8 = 38,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
};

struct GgmlTypeInfo {
  const char* name;     // as llama.cpp spells it: "F32", "Q4_K", ...
  uint32_t block_size;  // values per block (1 for plain types)
  uint32_t type_size;   // bytes per block
  bool can_dequantize;  // dequantize_ggml() decodes it
};

// nullptr for an id ggml never assigned (its byte size is unknown, so such a
// file cannot even be validated).
const GgmlTypeInfo* ggml_type_info(uint32_t type) noexcept;
// "F32, F16, BF16, Q4_0, ...": the types dequantize_ggml decodes.
const char* ggml_dequantizable_type_names() noexcept;

// Decodes `num_values` values (a whole number of blocks) of `type` at src
// into dst. src: num_values / block_size blocks of type_size bytes, any
// alignment; dst: [num_values] floats. The values equal the PyPI gguf
// package's NumPy dequantizer (gguf.quants.dequantize) bit for bit. Throws
// Error(unsupported) naming the type and the supported ones for a type
// whose can_dequantize is false, Error(invalid_argument) when num_values is
// not a multiple of the block size.
void dequantize_ggml(GgmlType type, const void* src, float* dst, int64_t num_values);

}  // namespace llmk
