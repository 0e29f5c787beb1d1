#include "kernels/cpu/linear_panels16.hpp"

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

// 16 consecutive panel entries as floats, for each storage type.
template <PanelType T>
inline __m512 load_panel(const void* base, int64_t at) {
  if constexpr (T == PanelType::f32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + at);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + at));
    if constexpr (T == PanelType::f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// R rows x C panels of accumulators held in registers for the whole k loop.
template <PanelType T, int R, int C>
void tile(const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride, int64_t num_cols,
          float* y, int64_t ldy) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m512 b[C];
    for (int c = 0; c < C; ++c) b[c] = load_panel<T>(panels, c * panel_stride + k * kPanelWidth);
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

using TileFn = void (*)(const float*, int64_t, int64_t, const void*, int64_t, int64_t, float*, int64_t);

template <PanelType T, int R>
constexpr TileFn tile_for(int c) {
  return c == 1 ? &tile<T, R, 1> : c == 2 ? &tile<T, R, 2> : c == 3 ? &tile<T, R, 3> : &tile<T, R, 4>;
}

template <PanelType T>
TileFn tile_fn(int rows, int panels) {
  static const TileFn table[kMaxRows][kMaxPanels] = {
      {tile_for<T, 1>(1), tile_for<T, 1>(2), tile_for<T, 1>(3), tile_for<T, 1>(4)},
      {tile_for<T, 2>(1), tile_for<T, 2>(2), tile_for<T, 2>(3), tile_for<T, 2>(4)},
      {tile_for<T, 3>(1), tile_for<T, 3>(2), tile_for<T, 3>(3), tile_for<T, 3>(4)},
      {tile_for<T, 4>(1), tile_for<T, 4>(2), tile_for<T, 4>(3), tile_for<T, 4>(4)},
      {tile_for<T, 5>(1), tile_for<T, 5>(2), tile_for<T, 5>(3), tile_for<T, 5>(4)},
      {tile_for<T, 6>(1), tile_for<T, 6>(2), tile_for<T, 6>(3), tile_for<T, 6>(4)}};
  return table[rows - 1][panels - 1];
}

template <PanelType T>
void gemm_panels(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features, const void* panels,
                 int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy) {
  const int64_t n_panels = num_panels(num_cols);
  const size_t elem = T == PanelType::f32 ? 4 : 2;
  const auto* base = static_cast<const uint8_t*>(panels);
  for (int64_t p0 = 0; p0 < n_panels; p0 += kMaxPanels) {
    const int c = static_cast<int>(std::min<int64_t>(kMaxPanels, n_panels - p0));
    const int64_t cols = std::min<int64_t>(num_cols - p0 * kPanelWidth, c * kPanelWidth);
    for (int64_t r0 = 0; r0 < num_rows; r0 += kMaxRows) {
      const int r = static_cast<int>(std::min<int64_t>(kMaxRows, num_rows - r0));
      tile_fn<T>(r, c)(x + r0 * ldx, ldx, in_features, base + static_cast<size_t>(p0 * panel_stride) * elem,
                       panel_stride, cols, y + r0 * ldy + p0 * kPanelWidth, ldy);
    }
  }
}

template <class W>
void pack(const W* w, int64_t out_features, int64_t in_features, W* packed) {
  const int64_t n_panels = num_panels(out_features);
  for (int64_t p = 0; p < n_panels; ++p) {
    W* panel = packed + p * in_features * kPanelWidth;
    for (int64_t k = 0; k < in_features; ++k)
      for (int64_t c = 0; c < kPanelWidth; ++c) {
        const int64_t n = p * kPanelWidth + c;
        panel[k * kPanelWidth + c] = n < out_features ? w[n * in_features + k] : W{0};
      }
  }
}

}  // namespace

void pack_panels_f32(const float* w, int64_t out_features, int64_t in_features, float* packed) {
  pack(w, out_features, in_features, packed);
}

void pack_panels_16(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed) {
  pack(w, out_features, in_features, packed);
}

void gemm_panels_f32(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features, const float* panels,
                     int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy) {
  gemm_panels<PanelType::f32>(x, ldx, num_rows, in_features, panels, panel_stride, num_cols, y, ldy);
}

void linear_panels(const float* x, int64_t num_rows, int64_t in_features, const void* packed, PanelType type,
                   int64_t out_features, float* y, int num_threads) {
  const int64_t panel_stride = in_features * kPanelWidth;
  const size_t elem = type == PanelType::f32 ? 4 : 2;
  const int64_t num_tiles = (num_panels(out_features) + kMaxPanels - 1) / kMaxPanels;
  const auto* base = static_cast<const uint8_t*>(packed);
#pragma omp parallel for num_threads(num_threads) schedule(static) if (num_threads > 1)
  for (int64_t t = 0; t < num_tiles; ++t) {
    const int64_t n0 = t * kMaxPanels * kPanelWidth;
    const int64_t cols = std::min<int64_t>(out_features - n0, kMaxPanels * kPanelWidth);
    const void* tile_panels = base + static_cast<size_t>(t * kMaxPanels * panel_stride) * elem;
    switch (type) {
      case PanelType::f32:
        gemm_panels<PanelType::f32>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                    out_features);
        break;
      case PanelType::f16:
        gemm_panels<PanelType::f16>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                    out_features);
        break;
      case PanelType::bf16:
        gemm_panels<PanelType::bf16>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                     out_features);
        break;
    }
  }
}

void linear_panels_f32(const float* x, int64_t num_rows, int64_t in_features, const float* packed,
                       int64_t out_features, float* y, int num_threads) {
  linear_panels(x, num_rows, in_features, packed, PanelType::f32, out_features, y, num_threads);
}

}  // namespace llmk::kernels::cpu
