// linear_panels16: y = x W^T over weights packed in 16-channel panels, the
// float path of the quantized linear plugins (layers kept in float, and the
// many-row path of the weight-only schemes, which dequantize a panel once and
// reuse it for every row). The family and its naming: kernels/cpu/linear.hpp.
//
// Panel layout: for output channels [16 b, 16 b + 16), a panel is
// [in_features][16]: row k holds w[16 b + c, k] for c = 0..15 (zero past
// out_features). A packed weight is num_panels16(out_features) panels back to
// back, made by pack_panels16 and sized by panels16_size
// (kernels/cpu/linear.hpp). Vectors run along output channels, so activations are broadcast and
// no horizontal sums are needed. Panels hold f32, or f16/bf16 converted to
// f32 as they are loaded (a layer kept in float keeps its checkpoint's
// precision and size); activations and accumulation are f32.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/work_shares.hpp"
#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// y = x W^T for a packed weight, split over output panels across num_threads.
// x: [num_rows, in_features], y: [num_rows, out_features]; packed:
// [panels16_size(...)] elements of w_dtype (LLMK_DTYPE_F32, F16 or BF16).
// Returns false for another dtype.
bool linear_panels16(const float* x, int64_t num_rows, int64_t in_features, const void* packed, llmk_dtype w_dtype,
                     int64_t out_features, float* y, int num_threads);

// The building block of the above for f32 panels, single-threaded (callers
// split the work): y[r, j] = sum_k x[r, k] * panel[j / 16][k][j % 16] for
// j < num_cols, over panels stored panel_stride floats apart.
// x: [num_rows, in_features] with row stride ldx; y: row stride ldy, only
// the first num_cols columns written.
void linear_panels16_f32_tile(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features,
                              const float* panels, int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy);

// The many-row path of the weight-only schemes: groups of
// kDequantizedTilePanels panels are widened to f32 once (dequantize(p, out)
// writes panel p as float[in_features][16]) into each thread's part of
// scratch, then multiplied for every row.
// scratch: [dequantized_panels16_scratch_size(in_features, num_threads)].
constexpr int64_t kDequantizedTilePanels = 4;

inline size_t dequantized_panels16_scratch_size(int64_t in_features, int num_threads) {
  return static_cast<size_t>(num_threads) * kDequantizedTilePanels * kPanels16Width *
         static_cast<size_t>(in_features);
}

template <class Dequantize>
void linear_dequantized_panels16(const float* x, int64_t num_rows, int64_t in_features, const Dequantize& dequantize,
                                 int64_t out_features, float* y, float* scratch, int num_threads) {
  const int64_t panel_stride = in_features * kPanels16Width;
  const int64_t n_panels = num_panels16(out_features);
  const int64_t num_tiles = (n_panels + kDequantizedTilePanels - 1) / kDequantizedTilePanels;
  for_each_item(num_tiles, num_threads, [&](int64_t t, int thread) {
    float* tile = scratch + static_cast<size_t>(thread) * kDequantizedTilePanels * panel_stride;
    const int64_t p0 = t * kDequantizedTilePanels;
    const int64_t c = std::min<int64_t>(kDequantizedTilePanels, n_panels - p0);
    for (int64_t i = 0; i < c; ++i) dequantize(p0 + i, tile + i * panel_stride);
    const int64_t n0 = p0 * kPanels16Width;
    linear_panels16_f32_tile(x, in_features, num_rows, in_features, tile, panel_stride,
                             std::min<int64_t>(out_features - n0, c * kPanels16Width), y + n0, out_features);
  });
}

// The one-row path of the weight-only schemes: register tiles of up to
// kOneRowTilePanels panels, shared out across num_threads (for_each_item:
// contiguous shares, the last tiles taken by whichever thread is free). Calls
// tile(C, p0, num_cols, n0) for each: C is std::integral_constant<int, c>
// for the tile's c panels from panel p0, which cover outputs [n0, n0 + num_cols).
constexpr int kOneRowTilePanels = 4;

template <class Tile>
void for_one_row_tiles(int64_t out_features, int num_threads, const Tile& tile) {
  const int64_t n_panels = num_panels16(out_features);
  const int64_t num_tiles = (n_panels + kOneRowTilePanels - 1) / kOneRowTilePanels;
  for_each_item(num_tiles, num_threads, [&](int64_t t, int) {
    const int64_t p0 = t * kOneRowTilePanels;
    const int c = static_cast<int>(std::min<int64_t>(kOneRowTilePanels, n_panels - p0));
    const int64_t n0 = p0 * kPanels16Width;
    const int64_t num_cols = std::min<int64_t>(out_features - n0, c * kPanels16Width);
    switch (c) {
      case 1: tile(std::integral_constant<int, 1>{}, p0, num_cols, n0); break;
      case 2: tile(std::integral_constant<int, 2>{}, p0, num_cols, n0); break;
      case 3: tile(std::integral_constant<int, 3>{}, p0, num_cols, n0); break;
      default: tile(std::integral_constant<int, 4>{}, p0, num_cols, n0); break;
    }
  });
}

}  // namespace llmk::kernels::cpu
