// The lookup-table 4-bit linear's int8 path on 16-channel panels: the
// lut4 weight (kernels/cpu/linear_lut4.hpp) repacked at load so that
// vectors run along output channels, as linear_w4's int4 panels do, and
// decode and prefill need no horizontal sums.
//
// Layout (lut4 panels), k32 = in_features rounded up to 32:
//   indices  u32 [num_panels16(out)][k32 / 8][16]: the word of channel c at
//            octet o holds q[c, 8o + j] in bits 4j..4j+3 (linear_w4's words,
//            so byte b holds an even input in its low nibble and the next
//            odd one in its high nibble);
//   scales   [num_panels16(out)][num_blocks][16], f16 where block_size is 32
//            (the unit layout's own bits), f32 otherwise;
// channels past out_features have index 0 and scale 0, inputs past
// in_features index 0 (their activations are zero).
//
// Arithmetic: exactly linear_lut4's int8 definition. Each row is rounded to
// int8 per 32 inputs (d = amax / 127 kept as f16, q = round-to-nearest-even
// of x * 127 / amax); per 32 inputs the integer sum of level * q is exact
// and then scaled by d, per block by the weight's scale, and the total by
// the codebook's unit. The codebook lookup runs inside the panel loop
// (vpshufb on the 16 levels, per 128-bit lane):
//   AVX-512 VNNI  the levels offset by 127 to unsigned bytes (0..254 for
//                 both codebooks), vpdpbusd with the signed activations, and
//                 127 times the 32 activations' integer sum taken back out
//                 once per 32 inputs (exact);
//   AVX2          the signed levels, vpmaddubsw of |level| and q with the
//                 level's sign (|pair sum| <= 2 * 127 * 127, no saturation),
//                 vpmaddwd into s32;
//   portable      the same sums one channel at a time (off x86 and the
//                 tests' reference path).
// One row (decode) runs register tiles of panels across threads; more rows
// (prefill, batches) take the panels across threads and several rows per
// pass over a panel (AVX-512 VNNI: up to six, the panel's levels looked up
// once into scratch for all of its passes; AVX2: up to four, each octet
// looked up once per pass).
// A row's outputs are the same integers in either, scaled in the same order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear_lut4.hpp"

namespace llmk::kernels::cpu {

// Bytes of the index words and of the scales.
size_t lut4_panels_index_bytes(const Lut4Shape& s);
size_t lut4_panels_scale_bytes(const Lut4Shape& s);
inline size_t lut4_panels_size(const Lut4Shape& s) { return lut4_panels_index_bytes(s) + lut4_panels_scale_bytes(s); }

// The unit layout (packed, lut4_size bytes) into panels (lut4_panels_size
// bytes: the indices, then the scales). Bit-exact: every index and scale
// as stored.
void pack_lut4_panels(const uint8_t* packed, const Lut4Shape& s, uint8_t* panels, int num_threads);

// Accessors into the panel layout (tests and tools).
uint8_t lut4_panels_index_at(const uint8_t* panels, const Lut4Shape& s, int64_t n, int64_t k);
float lut4_panels_scale_at(const uint8_t* panels, const Lut4Shape& s, int64_t n, int64_t k);

// Bytes of scratch linear_lut4_panels needs for up to max_rows rows on num_threads, 64-byte aligned.
size_t lut4_panels_scratch_size(const Lut4Shape& s, int64_t max_rows, int num_threads);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the panels,
// int8 activations. kernels: this build's CPU level, or the portable sums.
void linear_lut4_panels(const float* x, int64_t num_rows, const Lut4Shape& s, Lut4Book book, const uint8_t* panels,
                        float* y, void* scratch, int num_threads, Lut4Kernels kernels = Lut4Kernels::native);

}  // namespace llmk::kernels::cpu
