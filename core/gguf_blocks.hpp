// Decoders of ggml's quantized blocks: one block of a type's type_size bytes
// (core/gguf_types.hpp) into its block_size floats. Each computes the same
// float operations in the same order as the PyPI gguf package's NumPy
// dequantizer, so the values agree bit for bit (its translation unit is
// compiled without floating-point contraction: a fused multiply-add would
// round once where NumPy rounds twice).
//
// Layouts, little-endian; f16 = IEEE half; "nibble" = 4 bits, low first.
// Within a block, "value i" counts 0..block_size-1.
//   Q4_0   (32, 18): f16 d; u8 qs[16]. value j < 16 is the low nibble of
//          qs[j], value j+16 its high nibble.           x = d * (q - 8)
//   Q4_1   (32, 20): f16 d; f16 m; qs[16] as Q4_0.      x = d * q + m
//   Q5_0   (32, 22): f16 d; u32 qh; qs[16] as Q4_0; bit j of qh is value
//          j's fifth bit.                               x = d * (q - 16)
//   Q5_1   (32, 24): f16 d; f16 m; u32 qh; qs[16].      x = d * q + m
//   Q8_0   (32, 34): f16 d; i8 q[32].                   x = q * d
//   Q2_K  (256, 84): u8 scales[16]; u8 qs[64]; f16 d; f16 dmin. 2-bit q:
//          value 128c + 32s + l is bits 2s..2s+1 of qs[32c + l]; group
//          i/16 has scale (d * (sc & 15)) and min (dmin * (sc >> 4)).
//                                                       x = (d*sc) * q - dmin*m
//   Q3_K (256, 110): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d. The low
//          2 bits as Q2_K; bit i/32 of hmask[i % 32] clear subtracts 4. 16
//          6-bit scales: low 4 bits from nibbles of scales[0..7] (group k <
//          8: low nibble of byte k, else high nibble of byte k-8), high 2
//          bits from scales[8 + k%4] at bit 2*(k/4).    x = (d*(sc-32)) * q
//   Q4_K (256, 144): f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. 8
//          sub-blocks of 32 with a 6-bit scale and min packed in scales;
//          value 64c + 32h + l is nibble h of qs[32c + l].
//                                                       x = (d*sc) * q - dmin*m
//   Q5_K (256, 176): f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]:
//          Q4_K plus a fifth bit, bit i/32 of qh[i % 32].
//   Q6_K (256, 210): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Value
//          128h + 32t + l: low 4 bits nibble t/2 of ql[64h + 32(t%2) + l],
//          high 2 bits bits 2t..2t+1 of qh[32h + l]; group i/16.
//                                                       x = (d*sc) * (q - 32)
//   IQ4_NL (32, 18): f16 d; qs[16] as Q4_0, each nibble an index into a
//          fixed table of 16 levels.                    x = d * level
//   IQ4_XS (256, 136): f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]. 8
//          sub-blocks of 32: 6-bit scale = nibble ib%2 of scales_l[ib/2] |
//          bits 2ib..2ib+1 of scales_h << 4; values as IQ4_NL over
//          qs[16 ib .. 16 ib + 15].                     x = (d*(sc-32)) * level
//   TQ1_0 (256, 54): u8 qs[48]; u8 qh[4]; f16 d. Ternary digits: byte b
//          times 3^k (mod 256), times 3, >> 8, gives digit k of b. Values
//          0..159: digit i/32 of qs[i%32]; 160..239: digit (i-160)/16 of
//          qs[32 + i%16]; 240..255: digit (i-240)/4 of qh[i%4].
//                                                       x = d * (digit - 1)
//   TQ2_0 (256, 66): u8 qs[64]; f16 d. 2-bit q as Q2_K. x = d * (q - 1)
//   MXFP4  (32, 17): u8 e (E8M0 exponent); qs[16] as Q4_0, each nibble an
//          index into FP4 E2M1's 16 values, doubled.    x = 2^(e-128) * level
#pragma once

#include <cstdint>

#include "core/gguf_types.hpp"

namespace llmk {

// Decodes one block at `block` (type_size bytes, any alignment) into
// y[0..block_size).
using GgmlBlockDecoder = void (*)(const uint8_t* block, float* y);

// The decoder of a quantized type; nullptr for plain types (F32, F16, BF16,
// integers) and for quantized types this engine does not decode.
GgmlBlockDecoder ggml_block_decoder(GgmlType type) noexcept;

// An IEEE half's exact float value; NaNs keep their payload.
float gguf_half_to_float(uint16_t h) noexcept;

}  // namespace llmk
