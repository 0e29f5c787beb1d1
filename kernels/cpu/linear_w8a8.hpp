// W8A8 linear (AVX-512 VNNI, AVX2 or portable): y = x W^T with int8 weights
// and int8 activations, int32 accumulation, dequantization fused into the output.
//
// Weights: symmetric per output channel, scale_w[n] = max_k |w[n, k]| / 127,
// q_w = round(w / scale_w) in [-127, 127]. Packed for vpdpbusd as
// int8[num_panels16(out)][k_pad / 4][16 channels][4 consecutive k], zero-padded
// past out_features and in_features (k_pad = in_features rounded up to 4).
//
// Activations: symmetric per row at run time, scale_x[r] = max_k |x[r, k]| / 127.
// vpdpbusd multiplies unsigned by signed bytes, so rows are stored as
// u8 = q_x + 128 and the shift is removed with each channel's weight sum:
//   sum_k (q_x + 128) q_w = sum_k q_x q_w + 128 * row_sum[n].
// Output: y[r, n] = (acc - 128 row_sum[n]) * scale_x[r] * scale_w[n].
//
// One of the linear family; its naming and layouts: kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear_panels16.hpp"

namespace llmk::kernels::cpu {

inline int64_t w8a8_k_pad(int64_t in_features) { return (in_features + 3) / 4 * 4; }
inline size_t w8a8_size(int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(num_panels16(out_features) * kPanels16Width * w8a8_k_pad(in_features));
}
// The packed weight of channel n at input k (for tests and tools).
inline int8_t w8a8_packed_at(const int8_t* packed, int64_t in_features, int64_t n, int64_t k) {
  const int64_t k_pad = w8a8_k_pad(in_features);
  return packed[((n / kPanels16Width) * (k_pad / 4) + k / 4) * 64 + (n % kPanels16Width) * 4 + k % 4];
}

// Quantizes and packs w: [out_features, in_features] f32.
// packed: [w8a8_size], scale and row_sum: [num_panels16(out) * 16] (zero past out_features).
void pack_w8a8(const float* w, int64_t out_features, int64_t in_features, int8_t* packed, float* scale,
               int32_t* row_sum);

// Quantizes activations: x: [num_rows, in_features] -> xq: [num_rows, k_pad] (q + 128,
// padding 128), x_scale: [num_rows].
void quantize_rows_u8(const float* x, int64_t num_rows, int64_t in_features, uint8_t* xq, float* x_scale);

// Bytes of scratch linear_w8a8 needs for up to max_rows rows.
size_t w8a8_scratch_size(int64_t max_rows, int64_t in_features);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the packed weight.
// scratch: w8a8_scratch_size(num_rows, in_features) bytes, 64-byte aligned.
void linear_w8a8(const float* x, int64_t num_rows, int64_t in_features, const int8_t* packed, const float* scale,
                 const int32_t* row_sum, int64_t out_features, float* y, void* scratch, int num_threads);

}  // namespace llmk::kernels::cpu
