// Pieces shared by the linear kernels (kernels/cpu/linear.hpp): the thread
// split over output panels, and the shape, clearing and store of one register
// tile of MR rows x 64 output columns (panels64, bf16_pairs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/work_shares.hpp"

namespace llmk::kernels::cpu {

// Put before each loop over a register tile's rows or vectors. A tile is an
// array of vectors indexed by such loops; GCC keeps it in registers only if
// the loops are unrolled before it decides what to scalarize, which its own
// heuristics do not do for tiles of more than 8 vectors: the array then lives
// on the stack and every accumulator is stored on every k step (measured:
// the AVX2 6x16 tile ran at about half speed).
#define LLMK_UNROLL _Pragma("GCC unroll 16")

constexpr int kTileRows = 6;  // activation rows per register tile (6 x 64 outputs = 24 accumulators)

// Calls tile(std::integral_constant<int, R>{}, m) for row tiles [m, m + R)
// covering [0, num_rows): the fewest tiles of at most MaxRows (1 to 8) rows,
// as even as they go (32 rows in tiles of at most 6: 6, 6, 5, 5, 5, 5, not
// five of 6 and one of 2). Every tile reads the same weights, so a short one
// pays for them with few rows; a tile of one or two rows is bound by the
// FMA latency besides. Only heights up to MaxRows are instantiated.
template <int MaxRows, class Tile>
[[gnu::always_inline]] inline void for_tiles_of_at_most(int64_t num_rows, const Tile& tile) {
  static_assert(MaxRows >= 1 && MaxRows <= 8, "tiles of 1 to 8 rows");
  const int64_t tiles = (num_rows + MaxRows - 1) / MaxRows;
  int64_t m = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t rows = num_rows / tiles + (t < num_rows % tiles ? 1 : 0);
    switch (rows) {
      case 8: if constexpr (MaxRows >= 8) tile(std::integral_constant<int, 8>{}, m); break;
      case 7: if constexpr (MaxRows >= 7) tile(std::integral_constant<int, 7>{}, m); break;
      case 6: if constexpr (MaxRows >= 6) tile(std::integral_constant<int, 6>{}, m); break;
      case 5: if constexpr (MaxRows >= 5) tile(std::integral_constant<int, 5>{}, m); break;
      case 4: if constexpr (MaxRows >= 4) tile(std::integral_constant<int, 4>{}, m); break;
      case 3: if constexpr (MaxRows >= 3) tile(std::integral_constant<int, 3>{}, m); break;
      case 2: if constexpr (MaxRows >= 2) tile(std::integral_constant<int, 2>{}, m); break;
      default: tile(std::integral_constant<int, 1>{}, m); break;
    }
    m += rows;
  }
}

// The float kernels' row tiles.
template <class Tile>
[[gnu::always_inline]] inline void for_row_tiles(int64_t num_rows, const Tile& tile) {
  for_tiles_of_at_most<kTileRows>(num_rows, tile);
}

// Calls range(p_begin, p_end, thread) so that the ranges cover panels
// [0, num_panels) once: on the calling thread (thread 0) when one thread is
// asked for or the product is small (work = rows x in x out below 2^18),
// otherwise one panel at a time across min(num_threads, num_panels) threads,
// shared out by for_each_item (contiguous shares; a thread done with its own
// takes the last panels of the others').
template <class Range>
void for_panel_ranges(int64_t num_panels, int num_threads, int64_t work, const Range& range) {
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), num_panels));
  if (threads == 1 || work < (1 << 18)) {
    range(int64_t{0}, num_panels, 0);
    return;
  }
  for_each_item(num_panels, threads, [&](int64_t p, int thread) { range(p, p + 1, thread); });
}

}  // namespace llmk::kernels::cpu

#if defined(__AVX512F__)
#include <immintrin.h>

namespace llmk::kernels::cpu {

// The first min(cols, 16) lanes of a 16-float vector (cols > 0).
inline __mmask16 tail_mask(int64_t cols) {
  return cols >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << cols) - 1u);
}

template <int MR>
[[gnu::always_inline]] inline void zero_tile(__m512 (&acc)[MR][4]) {
  LLMK_UNROLL for (int m = 0; m < MR; ++m)
    LLMK_UNROLL for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
}

// c[m, 0:64] (+)= acc[m] for MR rows; only the first num_cols columns.
template <int MR>
[[gnu::always_inline]] inline void store_tile(const __m512 (&acc)[MR][4], float* c, int64_t ldc, bool accumulate,
                                              int num_cols) {
  LLMK_UNROLL for (int j = 0; j < 4; ++j) {
    const int valid = std::clamp(num_cols - 16 * j, 0, 16);
    if (valid == 0) break;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      float* cp = c + m * ldc + 16 * j;
      __m512 v = acc[m][j];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cp));
      _mm512_mask_storeu_ps(cp, mask, v);
    }
  }
}

}  // namespace llmk::kernels::cpu

#endif

// The AVX2 helpers exist in AVX-512 builds too: paths with no AVX-512 form
// there (W8A8 without VNNI) take their AVX2 one.
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace llmk::kernels::cpu {

// All-ones in the first clamp(cols, 0, 8) of 8 lanes (a vmaskmov mask).
inline __m256i tail_mask8(int64_t cols) {
  const int n = static_cast<int>(std::clamp<int64_t>(cols, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first min(cols, 8) floats of v to p (cols > 0).
inline void store8(float* p, __m256 v, int64_t cols) {
  if (cols >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, tail_mask8(cols), v);
}

// The first min(cols, 8) floats at p, zeros past them (cols > 0).
inline __m256 load8(const float* p, int64_t cols) {
  return cols >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask8(cols));
}

}  // namespace llmk::kernels::cpu

#endif
