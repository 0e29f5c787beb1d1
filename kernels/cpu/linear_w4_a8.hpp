// linear_w4's int8-activation path (W4Activations::int8; internal to
// kernels/cpu/): each row's activations rounded to int8 per weight group,
// then exact integer dot products with the 4-bit weights per group, scaled
// in f32, so a row's outputs are the same bits in a decode step, in a
// prefill and on every CPU level.
#pragma once

#include <cstdint>

#include "kernels/cpu/linear_w4.hpp"

namespace llmk::kernels::cpu {

// The activations of one row for the integer path: per octet o, xq of its
// even steps (8o, 8o+2, 8o+4, 8o+6) as the bytes of one int32 and of its odd
// steps as the next, matching a weight word's low and high nibbles of each
// byte; per group its scale and the integer sum of its xq.
struct W4RowA8 {
  int32_t* quads;  // [2 * k_pad / 8]
  float* x_scale;  // [num_groups]
  int32_t* x_sum;  // [num_groups]
};

// Floats of scratch one row's W4RowA8 takes: the quads, then scales and sums.
int64_t w4a8_row_floats(const W4Shape& s);

// Row m's W4RowA8 in scratch (rows back to back).
W4RowA8 row_a8_at(float* scratch, const W4Shape& s, int64_t m);

// x [in_features] rounded into r, per group of s.
void quantize_row_a8(const float* x, const W4Shape& s, const W4RowA8& r);

// One row already in r: y [out_features], the panels shared among num_threads.
void one_row_w4a8(const W4RowA8& r, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, float* y, int num_threads);

// Many rows: x [num_rows, in_features] rounded into scratch (num_rows x
// w4a8_row_floats), then y [num_rows, out_features] by row tiles per panel.
void rows_w4a8(const float* x, int64_t num_rows, const W4Shape& s, const uint32_t* packed, const float* scale,
               const uint8_t* zero, float* y, float* scratch, int num_threads);

}  // namespace llmk::kernels::cpu
