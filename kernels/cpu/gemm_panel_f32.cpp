#include "kernels/cpu/gemm_panel_f32.hpp"

// GCC 12 reports its own _mm512_undefined_* placeholders inside <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

namespace llmk::kernels::cpu {

namespace {

constexpr int kMaxRows = 6;    // rows per register tile
constexpr int kMaxPanels = 4;  // panels per register tile: 6 x 4 accumulators of 32 registers

inline __mmask16 tail_mask(int64_t cols) {
  return cols >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << cols) - 1u);
}

// R rows x C panels of accumulators held in registers for the whole k loop.
template <int R, int C>
void tile_f32(const float* x, int64_t ldx, int64_t k_len, const float* panels, int64_t panel_stride,
              int64_t num_cols, float* y, int64_t ldy) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m512 b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_ps(panels + c * panel_stride + k * kPanelWidth);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + k]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const int64_t cols = num_cols - c * kPanelWidth;
      if (cols <= 0) break;
      _mm512_mask_storeu_ps(y + r * ldy + c * kPanelWidth, tail_mask(cols), acc[r][c]);
    }
}

using TileFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t);

template <int R>
constexpr TileFn tile_for(int c) {
  return c == 1 ? &tile_f32<R, 1> : c == 2 ? &tile_f32<R, 2> : c == 3 ? &tile_f32<R, 3> : &tile_f32<R, 4>;
}

TileFn tile_fn(int rows, int panels) {
  static const TileFn table[kMaxRows][kMaxPanels] = {
      {tile_for<1>(1), tile_for<1>(2), tile_for<1>(3), tile_for<1>(4)},
      {tile_for<2>(1), tile_for<2>(2), tile_for<2>(3), tile_for<2>(4)},
      {tile_for<3>(1), tile_for<3>(2), tile_for<3>(3), tile_for<3>(4)},
      {tile_for<4>(1), tile_for<4>(2), tile_for<4>(3), tile_for<4>(4)},
      {tile_for<5>(1), tile_for<5>(2), tile_for<5>(3), tile_for<5>(4)},
      {tile_for<6>(1), tile_for<6>(2), tile_for<6>(3), tile_for<6>(4)}};
  return table[rows - 1][panels - 1];
}

}  // namespace

void pack_panels_f32(const float* w, int64_t out_features, int64_t in_features, float* packed) {
  const int64_t n_panels = num_panels(out_features);
  for (int64_t p = 0; p < n_panels; ++p) {
    float* panel = packed + p * in_features * kPanelWidth;
    for (int64_t k = 0; k < in_features; ++k)
      for (int64_t c = 0; c < kPanelWidth; ++c) {
        const int64_t n = p * kPanelWidth + c;
        panel[k * kPanelWidth + c] = n < out_features ? w[n * in_features + k] : 0.0f;
      }
  }
}

void gemm_panels_f32(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features, const float* panels,
                     int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy) {
  const int64_t n_panels = num_panels(num_cols);
  for (int64_t p0 = 0; p0 < n_panels; p0 += kMaxPanels) {
    const int c = static_cast<int>(std::min<int64_t>(kMaxPanels, n_panels - p0));
    const int64_t cols = std::min<int64_t>(num_cols - p0 * kPanelWidth, c * kPanelWidth);
    for (int64_t r0 = 0; r0 < num_rows; r0 += kMaxRows) {
      const int r = static_cast<int>(std::min<int64_t>(kMaxRows, num_rows - r0));
      tile_fn(r, c)(x + r0 * ldx, ldx, in_features, panels + p0 * panel_stride, panel_stride, cols,
                    y + r0 * ldy + p0 * kPanelWidth, ldy);
    }
  }
}

void linear_panels_f32(const float* x, int64_t num_rows, int64_t in_features, const float* packed,
                       int64_t out_features, float* y, int num_threads) {
  const int64_t panel_stride = in_features * kPanelWidth;
  const int64_t num_tiles = (num_panels(out_features) + kMaxPanels - 1) / kMaxPanels;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (num_threads > 1)
  for (int64_t t = 0; t < num_tiles; ++t) {
    const int64_t n0 = t * kMaxPanels * kPanelWidth;
    const int64_t cols = std::min<int64_t>(out_features - n0, kMaxPanels * kPanelWidth);
    gemm_panels_f32(x, in_features, num_rows, in_features, packed + t * kMaxPanels * panel_stride, panel_stride,
                    cols, y + n0, out_features);
  }
}

}  // namespace llmk::kernels::cpu
