// Float GEMM over weights packed in 16-channel panels: the float path of the
// quantized linear plugins (layers kept in float, and the many-row path of
// the weight-only schemes, which dequantize a panel once and reuse it for
// every row).
//
// Panel layout: for output channels [16 b, 16 b + 16), a panel is
// float[k_len][16]: row k holds w[16 b + c, k] for c = 0..15 (zero past
// out_features). A packed weight is ceil(out_features / 16) panels back to
// back. Vectors run along output channels, so activations are broadcast and
// no horizontal sums are needed. Panels hold f32, or f16/bf16 converted to
// f32 as they are loaded (a layer kept in float keeps its checkpoint's
// precision and size); activations and accumulation are f32.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace llmk::kernels::cpu {

constexpr int64_t kPanelWidth = 16;  // output channels per panel

enum class PanelType { f32, f16, bf16 };

inline int64_t num_panels(int64_t out_features) { return (out_features + kPanelWidth - 1) / kPanelWidth; }

// Packs w: [out_features, in_features] row-major into
// packed: [num_panels(out_features), in_features, 16].
void pack_panels_f32(const float* w, int64_t out_features, int64_t in_features, float* packed);

// The same for 16-bit weights (f16 or bf16 bits): packed: [num_panels, in_features, 16].
void pack_panels_16(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed);

// y[r, n0 + j] = sum_k x[r, k] * panel[j / 16][k][j % 16] for j < num_cols,
// over panels stored with stride panel_stride floats between consecutive
// panels of the tile. x: [num_rows, in_features] with row stride ldx;
// y: row stride ldy, only the first num_cols columns (from n0) written.
// Single-threaded: callers split the work.
void gemm_panels_f32(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features, const float* panels,
                     int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy);

// y = x W^T for a packed weight, split over output panels across num_threads.
// x: [num_rows, in_features], y: [num_rows, out_features].
void linear_panels_f32(const float* x, int64_t num_rows, int64_t in_features, const float* packed,
                       int64_t out_features, float* y, int num_threads);
// Any panel type: packed holds num_panels(out_features) * in_features * 16 elements of `type`.
void linear_panels(const float* x, int64_t num_rows, int64_t in_features, const void* packed, PanelType type,
                   int64_t out_features, float* y, int num_threads);

// The many-row path of the weight-only schemes: groups of kDequantizedPanels
// panels are widened to f32 once (dequantize(p, out) writes panel p as
// float[in_features][16]) into each thread's part of scratch, then multiplied
// for every row. scratch: dequantized_scratch_floats(in_features, num_threads).
constexpr int64_t kDequantizedPanels = 4;

inline size_t dequantized_scratch_floats(int64_t in_features, int num_threads) {
  return static_cast<size_t>(num_threads) * kDequantizedPanels * kPanelWidth * static_cast<size_t>(in_features);
}

template <class Dequantize>
void linear_dequantized_panels(const float* x, int64_t num_rows, int64_t in_features, int64_t out_features,
                               const Dequantize& dequantize, float* y, float* scratch, int num_threads) {
  const int64_t panel_stride = in_features * kPanelWidth;
  const int64_t n_panels = num_panels(out_features);
  const int64_t num_tiles = (n_panels + kDequantizedPanels - 1) / kDequantizedPanels;
#pragma omp parallel num_threads(num_threads) if (num_threads > 1)
  {
    float* tile = scratch + static_cast<size_t>(omp_get_thread_num()) * kDequantizedPanels * panel_stride;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int64_t p0 = t * kDequantizedPanels;
      const int64_t c = std::min<int64_t>(kDequantizedPanels, n_panels - p0);
      for (int64_t i = 0; i < c; ++i) dequantize(p0 + i, tile + i * panel_stride);
      const int64_t n0 = p0 * kPanelWidth;
      gemm_panels_f32(x, in_features, num_rows, in_features, tile, panel_stride,
                      std::min<int64_t>(out_features - n0, c * kPanelWidth), y + n0, out_features);
    }
  }
}

}  // namespace llmk::kernels::cpu
