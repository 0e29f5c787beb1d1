#include "kernels/cpu/linear_panels16.hpp"

#if defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_* placeholders inside <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include "kernels/cpu/convert.hpp"

#include "kernels/cpu/linear_tile.hpp"

namespace llmk::kernels::cpu {

namespace {

constexpr int kMaxRows = 6;    // rows per register tile
constexpr int kMaxPanels = 4;  // panels per register tile: 6 x 4 accumulators of 32 registers

#if defined(__AVX512F__)

// 16 consecutive panel entries as floats, for each storage type.
template <llmk_dtype T>
inline __m512 load_panel(const void* base, int64_t at) {
  if constexpr (T == LLMK_DTYPE_F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + at);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + at));
    if constexpr (T == LLMK_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// R rows x C panels of accumulators held in registers for the whole k loop.
template <llmk_dtype T, int R, int C>
void tile(const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride, int64_t num_cols,
          float* y, int64_t ldy) {
  __m512 acc[R][C];
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m512 b[C];
    LLMK_UNROLL for (int c = 0; c < C; ++c) b[c] = load_panel<T>(panels, c * panel_stride + k * kPanels16Width);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + k]);
      LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
    }
  }
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const int64_t cols = num_cols - c * kPanels16Width;
      if (cols <= 0) break;
      _mm512_mask_storeu_ps(y + r * ldy + c * kPanels16Width, tail_mask(cols), acc[r][c]);
    }
}

#elif defined(__AVX2__) && defined(__FMA__)

// 8 consecutive panel entries as floats, for each storage type.
template <llmk_dtype T>
inline __m256 load_panel8(const void* base, int64_t at) {
  if constexpr (T == LLMK_DTYPE_F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + at);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + at));
    if constexpr (T == LLMK_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// R rows x C panels (two 8-float halves each) held in registers for the whole k loop.
template <llmk_dtype T, int R, int C>
void pass(const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride, int64_t num_cols,
          float* y, int64_t ldy) {
  __m256 acc[R][C][2];
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k_len; ++k) {
    __m256 b[C][2];
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h) b[c][h] = load_panel8<T>(panels, c * panel_stride + k * kPanels16Width + 8 * h);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
      LLMK_UNROLL for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h) acc[r][c][h] = _mm256_fmadd_ps(a, b[c][h], acc[r][c][h]);
    }
  }
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h) {
        const int64_t cols = num_cols - c * kPanels16Width - 8 * h;
        if (cols <= 0) break;
        store8(y + r * ldy + c * kPanels16Width + 8 * h, acc[r][c][h], cols);
      }
}

// pass<T, R, n> for n <= N (only the pass widths a tile can take are instantiated).
template <llmk_dtype T, int R, int N>
void pass_of(int n, const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride,
             int64_t num_cols, float* y, int64_t ldy) {
  if constexpr (N > 1) {
    if (n < N) return pass_of<T, R, N - 1>(n, x, ldx, k_len, panels, panel_stride, num_cols, y, ldy);
  }
  pass<T, R, N>(x, ldx, k_len, panels, panel_stride, num_cols, y, ldy);
}

// 16 registers hold at most 12 accumulators: the C panels of an R-row tile
// are taken a few at a time (4 for one row, 2 for two, then 1).
template <llmk_dtype T, int R, int C>
void tile(const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride, int64_t num_cols,
          float* y, int64_t ldy) {
  constexpr int kStep = R == 1 ? 4 : R == 2 ? 2 : 1;
  const size_t elem = T == LLMK_DTYPE_F32 ? 4 : 2;
  for (int c0 = 0; c0 < C; c0 += kStep) {
    const int64_t cols = num_cols - c0 * kPanels16Width;
    if (cols <= 0) break;
    const void* p = static_cast<const uint8_t*>(panels) + static_cast<size_t>(c0 * panel_stride) * elem;
    pass_of<T, R, std::min(kStep, C)>(std::min(kStep, C - c0), x, ldx, k_len, p, panel_stride, cols,
                                      y + c0 * kPanels16Width, ldy);
  }
}

#else  // portable: the same register tiles as arrays, 16 lanes per loop

// 16 consecutive panel entries as floats, for each storage type.
template <llmk_dtype T>
inline void load_panel(const void* base, int64_t at, float* out) {
  if constexpr (T == LLMK_DTYPE_F32)
    std::memcpy(out, static_cast<const float*>(base) + at, kPanels16Width * sizeof(float));
  else if constexpr (T == LLMK_DTYPE_F16)
    f16_to_f32(static_cast<const uint16_t*>(base) + at, out, kPanels16Width);
  else
    bf16_to_f32(static_cast<const uint16_t*>(base) + at, out, kPanels16Width);
}

template <llmk_dtype T, int R, int C>
void tile(const float* x, int64_t ldx, int64_t k_len, const void* panels, int64_t panel_stride, int64_t num_cols,
          float* y, int64_t ldy) {
  float acc[R][C][kPanels16Width] = {};
  float b[C][kPanels16Width];
  for (int64_t k = 0; k < k_len; ++k) {
    LLMK_UNROLL for (int c = 0; c < C; ++c) load_panel<T>(panels, c * panel_stride + k * kPanels16Width, b[c]);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      const float a = x[r * ldx + k];
      LLMK_UNROLL for (int c = 0; c < C; ++c)
        for (int j = 0; j < kPanels16Width; ++j) acc[r][c][j] += a * b[c][j];
    }
  }
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const int64_t cols = std::min<int64_t>(num_cols - c * kPanels16Width, kPanels16Width);
      if (cols <= 0) break;
      std::memcpy(y + r * ldy + c * kPanels16Width, acc[r][c], static_cast<size_t>(cols) * sizeof(float));
    }
}

#endif

using TileFn = void (*)(const float*, int64_t, int64_t, const void*, int64_t, int64_t, float*, int64_t);

template <llmk_dtype T, int R>
constexpr TileFn tile_for(int c) {
  return c == 1 ? &tile<T, R, 1> : c == 2 ? &tile<T, R, 2> : c == 3 ? &tile<T, R, 3> : &tile<T, R, 4>;
}

template <llmk_dtype T>
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

template <llmk_dtype T>
void panels16_tile(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features, const void* panels,
                   int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy) {
  const int64_t n_panels = num_panels16(num_cols);
  const size_t elem = T == LLMK_DTYPE_F32 ? 4 : 2;
  const auto* base = static_cast<const uint8_t*>(panels);
  for (int64_t p0 = 0; p0 < n_panels; p0 += kMaxPanels) {
    const int c = static_cast<int>(std::min<int64_t>(kMaxPanels, n_panels - p0));
    const int64_t cols = std::min<int64_t>(num_cols - p0 * kPanels16Width, c * kPanels16Width);
    for (int64_t r0 = 0; r0 < num_rows; r0 += kMaxRows) {
      const int r = static_cast<int>(std::min<int64_t>(kMaxRows, num_rows - r0));
      tile_fn<T>(r, c)(x + r0 * ldx, ldx, in_features, base + static_cast<size_t>(p0 * panel_stride) * elem,
                       panel_stride, cols, y + r0 * ldy + p0 * kPanels16Width, ldy);
    }
  }
}

}  // namespace

void linear_panels16_f32_tile(const float* x, int64_t ldx, int64_t num_rows, int64_t in_features,
                              const float* panels, int64_t panel_stride, int64_t num_cols, float* y, int64_t ldy) {
  panels16_tile<LLMK_DTYPE_F32>(x, ldx, num_rows, in_features, panels, panel_stride, num_cols, y, ldy);
}

bool linear_panels16(const float* x, int64_t num_rows, int64_t in_features, const void* packed, llmk_dtype w_dtype,
                     int64_t out_features, float* y, int num_threads) {
  if (w_dtype != LLMK_DTYPE_F32 && w_dtype != LLMK_DTYPE_F16 && w_dtype != LLMK_DTYPE_BF16) return false;
  const int64_t panel_stride = in_features * kPanels16Width;
  const size_t elem = w_dtype == LLMK_DTYPE_F32 ? 4 : 2;
  const int64_t num_tiles = (num_panels16(out_features) + kMaxPanels - 1) / kMaxPanels;
  const auto* base = static_cast<const uint8_t*>(packed);
  for_each_item(num_tiles, num_threads, [&](int64_t t, int) {
    const int64_t n0 = t * kMaxPanels * kPanels16Width;
    const int64_t cols = std::min<int64_t>(out_features - n0, kMaxPanels * kPanels16Width);
    const void* tile_panels = base + static_cast<size_t>(t * kMaxPanels * panel_stride) * elem;
    switch (w_dtype) {
      case LLMK_DTYPE_F32:
        panels16_tile<LLMK_DTYPE_F32>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                      out_features);
        break;
      case LLMK_DTYPE_F16:
        panels16_tile<LLMK_DTYPE_F16>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                      out_features);
        break;
      case LLMK_DTYPE_BF16:
        panels16_tile<LLMK_DTYPE_BF16>(x, in_features, num_rows, in_features, tile_panels, panel_stride, cols, y + n0,
                                       out_features);
        break;
      default: break;
    }
  });
  return true;
}

}  // namespace llmk::kernels::cpu
