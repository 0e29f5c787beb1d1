// Weight-only int4 linear: y = x W^T with f32 activations and 4-bit weights
// quantized in groups along in_features, unpacked inside the kernel.
//
// Each group of group_size inputs of one output channel is asymmetric with
// an integer zero point. A range [lo, hi] with lo <= 0 <= hi maps to 0..15:
//   scale = (hi - lo) / 15,  zero = round(-lo / scale),
//   q = clamp(round(w / scale) + zero, 0, 15),  w ~= (q - zero) * scale,
// so zero is exact, the zero point fits 0..15 and every weight lands on the
// nearest of the group's 16 levels. The range is either the group's own
// [min(0, lo), max(0, hi)] (W4Range::min_max: |w - deq(w)| <= scale / 2 for
// every weight), or that range shrunk by a factor f in [0.75, 1] (steps of
// 0.01, both ends alike) chosen to minimize the group's squared error
// (W4Range::mse, the default): clipping the few largest weights buys a finer
// step for all the others. No calibration data is involved; the full range
// is one of the candidates, so the squared error never exceeds min_max's.
//
// Packing: uint32[num_panels16(out)][k_pad / 8][16 channels]; the word of
// channel c at octet o holds q[., 8 o + j] in bits 4j..4j+3 (two weights per
// byte), k_pad = in_features rounded up to 8. scale: f32 and zero: u8, both
// [num_panels16(out)][num_groups][16]. Groups must start on an octet: group_size
// is a multiple of 8, or covers all of in_features.
//
// With f32 activations, one row (decode) multiplies raw q by x and applies
// scale and zero point per group: sum_k (q - z) s x = s (sum_k q x - z sum_k x);
// more rows dequantize a tile of panels to f32 once and reuse it for every
// row. With int8 activations (W4Activations below) every row takes the
// integer path.
//
// One of the linear family; its naming and layouts: kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear_panels16.hpp"

namespace llmk::kernels::cpu {

struct W4Shape {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t group_size = 0;
  int64_t k_pad() const { return (in_features + 7) / 8 * 8; }
  int64_t num_groups() const { return (in_features + group_size - 1) / group_size; }
  size_t group_params() const { return static_cast<size_t>(num_panels16(out_features) * kPanels16Width * num_groups()); }
  // Group g's octets of packed words: [group_octet_begin(g), group_octet_end(g)), the last group's
  // running to k_pad.
  int64_t group_octet_begin(int64_t g) const { return g * group_size / 8; }
  int64_t group_octet_end(int64_t g) const { return g + 1 == num_groups() ? k_pad() / 8 : (g + 1) * group_size / 8; }
  // group_size divides into octets, or one group spans every input.
  bool valid() const { return group_size > 0 && (group_size % 8 == 0 || group_size >= in_features); }
};

// Words of the packed weight.
inline size_t w4_size(const W4Shape& s) {
  return static_cast<size_t>(num_panels16(s.out_features) * kPanels16Width * s.k_pad() / 8);
}

// Accessors into the packed format (for tests and tools).
inline uint32_t w4_q_at(const uint32_t* packed, const W4Shape& s, int64_t n, int64_t k) {
  const uint32_t word = packed[((n / kPanels16Width) * (s.k_pad() / 8) + k / 8) * kPanels16Width + n % kPanels16Width];
  return (word >> (4 * (k % 8))) & 0xfu;
}
inline int64_t w4_param_index(const W4Shape& s, int64_t n, int64_t group) {
  return ((n / kPanels16Width) * s.num_groups() + group) * kPanels16Width + n % kPanels16Width;
}

// How a group's range is chosen (see the top of this file).
enum class W4Range { min_max, mse };

struct W4Group {
  float scale;   // 0 for an all-zero group
  uint8_t zero;
};

// Scale and zero point of one group of n weights.
W4Group w4_fit_group(const float* w, int64_t n, W4Range range);

// Quantizes and packs w: [out_features, in_features].
void pack_w4(const float* w, const W4Shape& shape, uint32_t* packed, float* scale, uint8_t* zero,
             W4Range range = W4Range::mse);

// How linear_w4 treats the activations. f32: exact, as above. int8: each
// row of x is quantized per weight group to int8 (absmax / 127, round to
// nearest) and each group's sum of q * xq is an exact integer sum on the
// integer multiply-add units, then
//   sum_k (q - z) s x ~= s sx (sum_k q xq - z sum_k xq),
// which is how int4 formats with 8-bit activations (llama.cpp's Q4_0 x Q8_0)
// multiply; on CPUs without 4-bit float conversion it is several times
// fewer instructions per weight. Every row of every step is computed the
// same way (a row's outputs do not depend on the step's other rows).
enum class W4Activations { f32, int8 };

// Floats of scratch linear_w4 needs for up to max_rows rows.
size_t w4_scratch_size(const W4Shape& shape, int num_threads, int64_t max_rows = 1,
                       W4Activations activations = W4Activations::f32);

// What multiplies more than one row with int8 activations (prefill and
// batched steps; one row always takes the vector kernels):
//   vector     AVX-512 VNNI or AVX2 integer multiply-adds (every CPU);
//   amx        AMX-INT8 tiles (linear_w4_tiles.hpp), where w4_amx_available()
//              and w4_amx_shape(); elsewhere the vector kernels;
//   amx_model  the same tile kernel on a software model of the tile unit,
//              where w4_amx_built() and w4_amx_shape() (tests on any CPU).
// Every choice gives the same bits: the integer sums are exact and the
// epilogue is shared lane for lane.
enum class W4Matmul { vector, amx, amx_model };

// This build's kernel library has the tile kernel (AVX-512 levels).
bool w4_amx_built();
// ... and this CPU runs it: AMX-TILE and AMX-INT8, with the tile data state
// granted by the kernel (requested on the first call).
bool w4_amx_available();
// Shapes the tile kernel takes: in_features and group_size multiples of 64,
// group_size at most 512.
bool w4_amx_shape(const W4Shape& shape);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the packed weight.
void linear_w4(const float* x, int64_t num_rows, const W4Shape& shape, const uint32_t* packed, const float* scale,
               const uint8_t* zero, float* y, float* scratch, int num_threads,
               W4Activations activations = W4Activations::f32, W4Matmul matmul = W4Matmul::vector);

}  // namespace llmk::kernels::cpu
