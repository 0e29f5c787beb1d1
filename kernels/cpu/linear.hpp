// The CPU linear family: every kernel in kernels/cpu/linear_*.hpp computes
//   y = x W^T,  y[m, n] = sum_k x[m, k] * w[n, k],
// x: [num_rows, in_features] f32 (row stride in_features); W: out_features
// rows of in_features weights, either as the checkpoint stores them or
// repacked once at load into a layout the kernel streams; y: [num_rows,
// out_features] f32, overwritten. They differ only in the weight's layout
// and dtype, and one scheme names them all after it:
//
//   linear_<layout>(x, num_rows, in_features, <weight>, out_features, y, [scratch,] num_threads)
//   pack_<layout>(w, out_features, in_features, <packed>)  once at load (quantizing where the layout is)
//   <layout>_size(out_features, in_features)               elements of the packed weight
//   <layout>_scratch_size(...)                             elements of the caller-owned scratch
//
// <weight> is the packed pointer(s) followed by the runtime weight dtype
// (llmk_dtype) where the layout serves several. The kernels never allocate:
// scratch comes from the caller, sized by the query.
//
//   layout      weight layout                                      dtype
//   rows        [out][in], as stored (no packer)                   f32, f16, bf16
//   panels64    [ceil(out / 64)][in][64]                           f32, f16, bf16
//   bf16_pairs  [ceil(out / 64)][ceil(in / 2)][64][2]              bf16 (exact, or on the BF16 dot units)
//   panels16    [ceil(out / 16)][in][16]                           f32, f16, bf16
//   w4          [ceil(out / 16)][ceil(in / 8)][16] u32 nibbles     int4, per-group scale + zero point
//   w8a8        [ceil(out / 16)][ceil(in / 4)][16][4]              int8 weights x int8 activations
//   wu8         [ceil(out / 16)][in][16]                           uint8, scale + zero point
//   lut4        [out][ceil(in / 64)] units of 36 bytes                4-bit codebook indices, block scales
//
// A panel is `width` consecutive output channels stored k-major, so one k
// step reads the panel's weights contiguously and multiplies them by one
// broadcast activation; past out_features a panel is zero. Which plugin calls
// which kernel: docs/architecture.md, "CPU linear kernels".
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmk::kernels::cpu {

constexpr int64_t kPanels16Width = 16;  // output channels per panel of panels16 and the quantized layouts
constexpr int64_t kPanels64Width = 64;  // output channels per panel of panels64 and bf16_pairs

inline int64_t num_panels16(int64_t out_features) { return (out_features + kPanels16Width - 1) / kPanels16Width; }
inline int64_t num_panels64(int64_t out_features) { return (out_features + kPanels64Width - 1) / kPanels64Width; }

// The plain panel packer (panels16, and panels64 where its build keeps [k][64]):
// w: [out_features, in_features] row-major ->
// packed: [ceil(out_features / width)][in_features][width], zero past out_features.
// Elements are copied unchanged (f32, or f16/bf16 bits).
void pack_panels(const float* w, int64_t out_features, int64_t in_features, int64_t width, float* packed);
void pack_panels(const uint16_t* w, int64_t out_features, int64_t in_features, int64_t width, uint16_t* packed);

// panels16 and panels64: elements of the packed form of a [out_features,
// in_features] weight, and panels16's packer (T: float, or uint16_t for f16/bf16 bits).
inline size_t panels16_size(int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(num_panels16(out_features) * kPanels16Width * in_features);
}
inline size_t panels64_size(int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(num_panels64(out_features) * kPanels64Width * in_features);
}
template <class T>
void pack_panels16(const T* w, int64_t out_features, int64_t in_features, T* packed) {
  pack_panels(w, out_features, in_features, kPanels16Width, packed);
}
// pack_panels64 (kernels/cpu/linear_panels64.hpp) orders a panel's elements
// by the CPU level its kernels are built for.

}  // namespace llmk::kernels::cpu
