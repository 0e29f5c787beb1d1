#include "kernels/cpu/linear_bf16_pairs.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/vec_math.hpp"  // also silences GCC 12's false uninitialized warnings in intrinsics

namespace llmk::kernels::cpu {

namespace {

constexpr int64_t kCols = kPanels64Width;  // outputs per panel
constexpr int64_t kPairRow = 2 * kCols;    // elements per pair of k steps in a panel
constexpr int64_t kBlockPairs = 128; // pairs of k steps per block: 32 KiB of a panel, reused by every row tile

int64_t num_pairs(int64_t k) { return (k + 1) / 2; }

// Elements per row of BF16 activation scratch: in_features rounded up to even.
int64_t bf16_row_stride(int64_t in_features) { return (in_features + 1) & ~int64_t{1}; }

}  // namespace

size_t bf16_pairs_size(int64_t out_features, int64_t in_features) {
  return static_cast<size_t>(num_panels64(out_features) * num_pairs(in_features) * kPairRow);
}

void pack_bf16_pairs(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed) {
  const int64_t panels = num_panels64(out_features), pairs = num_pairs(in_features);
#pragma omp parallel for
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* dst = packed + p * pairs * kPairRow;
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t n = p * kCols + c;
      for (int64_t k = 0; k < 2 * pairs; ++k)
        dst[(k / 2) * kPairRow + 2 * c + k % 2] = n < out_features && k < in_features ? w[n * in_features + k] : 0;
    }
  }
}

size_t bf16_pairs_scratch_size(int64_t num_rows, int64_t in_features) {
  return static_cast<size_t>(num_rows * bf16_row_stride(in_features));
}

#if defined(__AVX512F__)

namespace {

// Exact: c[0:MR, 0:64] (+)= x[0:MR, 0:depth] * w, the block's weights widened
// in registers. A pair row's vector j holds columns 16j .. 16j + 15 as 32-bit
// lanes (low half: step 2i, high half: step 2i + 1), so a shift and a mask
// give both steps' weights as F32. No software prefetch when streaming
// (decode): on a 2-core Zen 4, asking for the weights 16 KiB ahead decoded
// llama-110m's BF16 layers at a median 82-96% of the read bandwidth, the
// hardware prefetcher alone at 92-109% (eight alternating pairs of runs;
// 2, 8 and 32 KiB ahead no better).
template <int MR>
inline void tile_exact(const float* x, int64_t ldx, const uint16_t* b, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  zero_tile<MR>(acc);
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  for (int64_t k = 0; k < depth; k += 2) {
    const uint16_t* bk = b + (k / 2) * kPairRow;
    __m512i v[4];
    LLMK_UNROLL for (int j = 0; j < 4; ++j) v[j] = _mm512_loadu_si512(bk + 32 * j);
    __m512 w[4];
    LLMK_UNROLL for (int j = 0; j < 4; ++j) w[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v[j], 16));
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * ldx + k]);
      LLMK_UNROLL for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_fmadd_ps(xv, w[j], acc[m][j]);
    }
    if (k + 1 == depth) break;  // an odd last step: its partner is zero padding
    LLMK_UNROLL for (int j = 0; j < 4; ++j) w[j] = _mm512_castsi512_ps(_mm512_and_si512(v[j], high));
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * ldx + k + 1]);
      LLMK_UNROLL for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_fmadd_ps(xv, w[j], acc[m][j]);
    }
  }
  store_tile<MR>(acc, c, ldc, accumulate, num_cols);
}

#if defined(__AVX512BF16__)
// BF16: the same tile on the dot-product units; x holds BF16 pairs (stride
// ldx elements, zero-padded to an even depth).
template <int MR>
inline void tile_dot(const uint16_t* x, int64_t ldx, const uint16_t* b, int64_t depth, float* c, int64_t ldc,
                     bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  zero_tile<MR>(acc);
  for (int64_t p = 0; p < num_pairs(depth); ++p) {
    const uint16_t* bp = b + p * kPairRow;
    __m512bh w[4];
    LLMK_UNROLL for (int j = 0; j < 4; ++j) w[j] = (__m512bh)_mm512_loadu_si512(bp + 32 * j);
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, x + m * ldx + 2 * p, sizeof(pair));
      const auto xv = (__m512bh)_mm512_set1_epi32(pair);
      LLMK_UNROLL for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], xv, w[j]);
    }
  }
  store_tile<MR>(acc, c, ldc, accumulate, num_cols);
}
#endif

// Every row tile of one block: T is float (exact) or uint16_t (BF16 pairs).
template <class T>
void tile_rows(const T* x, int64_t ldx, const uint16_t* b, int64_t depth, float* c, int64_t ldc, int64_t num_rows,
               bool accumulate, int num_cols) {
  auto tile = [&](auto rows_tag, int64_t m) {
    constexpr int MR = decltype(rows_tag)::value;
    if constexpr (std::is_same_v<T, float>) {
      tile_exact<MR>(x + m * ldx, ldx, b, depth, c + m * ldc, ldc, accumulate, num_cols);
    } else {
#if defined(__AVX512BF16__)
      tile_dot<MR>(x + m * ldx, ldx, b, depth, c + m * ldc, ldc, accumulate, num_cols);
#endif
    }
  };
  for_row_tiles(num_rows, tile);
}

template <class T>
void panels_range(const T* x, int64_t ldx, const uint16_t* packed, float* y, int64_t num_rows, int64_t k_len,
                  int64_t n_out, int64_t p_begin, int64_t p_end) {
  const int64_t pairs = num_pairs(k_len);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int num_cols = static_cast<int>(std::min<int64_t>(kCols, n_out - p * kCols));
    for (int64_t k0 = 0; k0 < k_len; k0 += 2 * kBlockPairs) {
      const int64_t depth = std::min(2 * kBlockPairs, k_len - k0);
      tile_rows<T>(x + k0, ldx, packed + (p * pairs + k0 / 2) * kPairRow, depth, y + p * kCols, n_out, num_rows,
                   k0 > 0, num_cols);
    }
  }
}

template <class T>
void run(const T* x, int64_t ldx, const uint16_t* packed, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
         int num_threads) {
  for_panel_ranges(num_panels64(n_out), num_threads, num_rows * k_len * n_out, [&](int64_t p_begin, int64_t p_end, int) {
    panels_range<T>(x, ldx, packed, y, num_rows, k_len, n_out, p_begin, p_end);
  });
}

}  // namespace

bool have_bf16_dot() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

void linear_bf16_pairs(const float* x, int64_t num_rows, int64_t in_features, const uint16_t* packed,
                       bool round_activations, int64_t out_features, float* y, uint16_t* x_bf16, int num_threads) {
  if (!round_activations || !have_bf16_dot()) {
    run<float>(x, in_features, packed, y, num_rows, in_features, out_features, num_threads);
    return;
  }
  const int64_t ldx = bf16_row_stride(in_features);
  for (int64_t m = 0; m < num_rows; ++m) {
    f32_to_bf16(x + m * in_features, x_bf16 + m * ldx, in_features);
    if (ldx != in_features) x_bf16[m * ldx + in_features] = 0;  // the odd step's partner
  }
  run<uint16_t>(x_bf16, ldx, packed, y, num_rows, in_features, out_features, num_threads);
}

#elif defined(__AVX2__) && defined(__FMA__)

// AVX2 (no BF16 dot products): exact only. A pair row's 64 columns are 8
// vectors of 8 32-bit lanes (low half: step 2i, high half: step 2i + 1),
// widened by a shift and a mask. Every output sums its products in k order
// in one F32 accumulator, two FMAs per pair (an odd last step's partner is
// x = 0 against a zero weight), whichever path computes it: a row's outputs
// do not depend on how many rows the step has.

namespace {

const __m256i kHighHalves = _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u));

// How far ahead the one-row pass asks for its panel (4 pair rows of 256
// bytes). Measured on a 2-core Zen 3 over llama-110m's BF16 layers in turn,
// interleaved: 2-7% faster than the hardware prefetcher alone (median of 100
// runs, four runs); 2048 and 4096 bytes gained less.
constexpr int kRowPrefetchBytes = 1024;

// One row x one panel (decode): 8 accumulators over the panel's 64 columns.
void panel_row_exact_avx2(const float* x, int64_t in_features, const uint16_t* panel, int64_t pairs, float* out) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const int64_t full_pairs = in_features / 2;  // pairs whose second step exists
  auto step = [&](const uint16_t* pair_row, __m256 x0, __m256 x1) {
    LLMK_UNROLL for (int j = 0; j < 8; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_row) + j);
      acc[j] = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), acc[j]);
      acc[j] = _mm256_fmadd_ps(x1, _mm256_castsi256_ps(_mm256_and_si256(v, kHighHalves)), acc[j]);
    }
  };
  for (int64_t i = 0; i < full_pairs; ++i) {
    const char* ahead = reinterpret_cast<const char*>(panel + i * kPairRow) + kRowPrefetchBytes;
    LLMK_UNROLL for (int line = 0; line < 4; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
    step(panel + i * kPairRow, _mm256_set1_ps(x[2 * i]), _mm256_set1_ps(x[2 * i + 1]));
  }
  if (full_pairs < pairs)  // odd depth: the last step's partner is zero
    step(panel + full_pairs * kPairRow, _mm256_set1_ps(x[2 * full_pairs]), _mm256_setzero_ps());
  LLMK_UNROLL for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

// MR rows x one 16-column strip of a panel over the whole depth (prefill and
// batched steps): 2 MR accumulators; the strip (64 bytes per pair) stays in
// L1 or L2 while every row tile passes over it. Not inlined: inside its
// callers GCC spills the tile.
// x: MR rows of in_features (contiguous); y: stride ldy.
template <int MR>
[[gnu::noinline]] void strip_rows_exact_avx2(const float* x, int64_t in_features, const uint16_t* strip, int64_t pairs,
                                             float* y, int64_t ldy, int num_cols) {
  const int64_t ldx = in_features;
  __m256 acc[MR][2];
  LLMK_UNROLL for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  const int64_t full_pairs = in_features / 2;
  auto step = [&](int64_t i, bool has_partner) {
    // Step 2i for every row, then step 2i + 1 (the same order per output as
    // above; 12 accumulators + 2 weights + 1 activation fit 16 registers).
    const auto* v = reinterpret_cast<const __m256i*>(strip + i * kPairRow);
    const __m256 lo0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(v), 16));
    const __m256 lo1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(v + 1), 16));
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m256 x0 = _mm256_broadcast_ss(x + m * ldx + 2 * i);
      acc[m][0] = _mm256_fmadd_ps(x0, lo0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(x0, lo1, acc[m][1]);
    }
    const __m256 hi0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(v), kHighHalves));
    const __m256 hi1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(v + 1), kHighHalves));
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m256 x1 = has_partner ? _mm256_broadcast_ss(x + m * ldx + 2 * i + 1) : _mm256_setzero_ps();
      acc[m][0] = _mm256_fmadd_ps(x1, hi0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(x1, hi1, acc[m][1]);
    }
  };
  for (int64_t i = 0; i < full_pairs; ++i) step(i, true);
  if (full_pairs < pairs) step(full_pairs, false);
  LLMK_UNROLL for (int m = 0; m < MR; ++m)
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const int valid = num_cols - 8 * h;
      if (valid > 0) store8(y + m * ldy + 8 * h, acc[m][h], valid);
    }
}

// Every row over one panel, strip by strip (one strip stays in L1 while the
// row tiles pass over it), the rows in tiles of at most 6 (for_row_tiles).
void panel_rows_exact_avx2(const float* x, int64_t num_rows, int64_t in_features, const uint16_t* panel,
                           int64_t pairs, float* y, int64_t ldy, int num_cols) {
  for (int s = 0; s < num_cols; s += 16) {
    const uint16_t* strip = panel + 2 * s;
    for_row_tiles(num_rows, [&](auto rows_tag, int64_t m) {
      strip_rows_exact_avx2<decltype(rows_tag)::value>(x + m * in_features, in_features, strip, pairs,
                                                       y + m * ldy + s, ldy, num_cols - s);
    });
  }
}

}  // namespace

bool have_bf16_dot() { return false; }

void linear_bf16_pairs(const float* x, int64_t num_rows, int64_t in_features, const uint16_t* packed, bool,
                       int64_t out_features, float* y, uint16_t*, int num_threads) {
  const int64_t pairs = num_pairs(in_features);
  for_panel_ranges(num_panels64(out_features), num_threads, num_rows * in_features * out_features,
                   [&](int64_t p_begin, int64_t p_end, int) {
    alignas(32) float tile[kCols];
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t cols = std::min(kCols, out_features - p * kCols);
      const uint16_t* panel = packed + p * pairs * kPairRow;
      if (num_rows == 1) {
        panel_row_exact_avx2(x, in_features, panel, pairs, tile);
        std::copy_n(tile, cols, y + p * kCols);
      } else {
        panel_rows_exact_avx2(x, num_rows, in_features, panel, pairs, y + p * kCols, out_features,
                              static_cast<int>(cols));
      }
    }
  });
}

#else  // portable fallback: exact only

bool have_bf16_dot() { return false; }

void linear_bf16_pairs(const float* x, int64_t num_rows, int64_t in_features, const uint16_t* packed, bool,
                       int64_t out_features, float* y, uint16_t*, int) {
  const int64_t pairs = num_pairs(in_features);
  for (int64_t m = 0; m < num_rows; ++m)
    for (int64_t n = 0; n < out_features; ++n) {
      const uint16_t* panel = packed + (n / kCols) * pairs * kPairRow + 2 * (n % kCols);
      float sum = 0.0f;
      for (int64_t k = 0; k < in_features; ++k) {
        float w;
        bf16_to_f32(panel + (k / 2) * kPairRow + k % 2, &w, 1);
        sum += x[m * in_features + k] * w;
      }
      y[m * out_features + n] = sum;
    }
}

#endif

}  // namespace llmk::kernels::cpu
