// Weight-only uint8 linear with zero points: y = x W^T with f32 activations.
//
// The range [min(0, lo), max(0, hi)] of the whole tensor (per_channel =
// false) or of each output channel maps to 0..255:
//   scale = (max - min) / 255,  zero = round(-min / scale),
//   q = clamp(round(w / scale) + zero, 0, 255),  w ~= (q - zero) * scale,
// so |w - deq(w)| <= scale / 2 (zero is in the range, so it is exact).
//
// Packing: uint8[num_panels16(out)][in_features][16 channels]; scale f32 and
// zero u8: [num_panels16(out) * 16] (repeated per channel in per-tensor mode).
// One row: y[n] = scale[n] * (sum_k q x - zero[n] * sum_k x); more rows
// dequantize a tile of panels to f32 once and reuse it for every row.
//
// One of the linear family; its naming and layouts: kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear_panels16.hpp"

namespace llmk::kernels::cpu {

inline size_t wu8_size(int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(num_panels16(out_features) * kPanels16Width * in_features);
}
inline uint8_t wu8_q_at(const uint8_t* packed, int64_t in_features, int64_t n, int64_t k) {
  return packed[((n / kPanels16Width) * in_features + k) * kPanels16Width + n % kPanels16Width];
}

// Quantizes and packs w: [out_features, in_features]; scale, zero: [num_panels16(out) * 16].
void pack_wu8(const float* w, int64_t out_features, int64_t in_features, bool per_channel,
              uint8_t* packed, float* scale, uint8_t* zero);

// Floats of scratch linear_wu8 needs.
size_t wu8_scratch_size(int64_t in_features, int num_threads);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the packed weight.
void linear_wu8(const float* x, int64_t num_rows, int64_t in_features, const uint8_t* packed, const float* scale,
                const uint8_t* zero, int64_t out_features, float* y, float* scratch, int num_threads);

}  // namespace llmk::kernels::cpu
