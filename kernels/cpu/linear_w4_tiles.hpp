// The int4 kernel's many-row path on AMX-INT8 tiles (linear_w4.cpp calls
// it; see linear_w4.hpp's W4Matmul). Rows come already quantized to int8
// per weight group, in linear_w4_a8.hpp's row layout: per row, the activation
// quads (two int32 per octet of inputs: the even steps' bytes, then the odd
// steps'), then the per-group scales (f32) and sums (int32).
//
// Per 16-channel panel and weight group, the packed words become two
// unsigned-byte tiles per 64 inputs (a word's low nibbles against the even
// quads, its high nibbles against the odd ones), and tdpbsud sums each row's
// int8 quads times them exactly in int32. The epilogue is the vector
// kernels', lane for lane (zero point, then scale times the row's group
// scale, one multiply-add per group into the output row), so the outputs are
// the same bits as linear_w4's vector path.
//
// The same kernel runs on the tile unit itself or on a software model of it
// (W4Matmul::amx_model: the tile registers as arrays, tdpbsud as its
// definition), which is how CPUs without AMX test it.
#pragma once

#include <cstdint>

#include "kernels/cpu/linear_w4.hpp"

namespace llmk::kernels::cpu::w4_tiles {

// Floats of one row in that layout (defined beside it, in linear_w4.cpp).
int64_t row_floats(const W4Shape& shape);

// rows: num_rows rows of row_floats floats each (the layout above).
// y: [num_rows, shape.out_features]. model: the software tile unit.
void rows(bool model, const W4Shape& shape, const uint32_t* packed, const float* scale, const uint8_t* zero,
          const float* rows, int64_t row_floats, int64_t num_rows, float* y, int num_threads);

}  // namespace llmk::kernels::cpu::w4_tiles
