#include "kernels/cpu/linear_panels64.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/vec_math.hpp"  // also silences GCC 12's false uninitialized warnings in intrinsics

// The AVX2 build stores panels as strips (kernels/cpu/linear_panels64.hpp).
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define LLMK_PANELS64_STRIPS 1
#endif

namespace llmk::kernels::cpu {

namespace {

constexpr int64_t kDepth = 256;      // k steps per block: a converted panel block is 64 KiB of f32 (L2)
constexpr int64_t kConvertRows = 12; // from this many rows on, a block is widened to f32 once and reused

#if defined(LLMK_PANELS64_STRIPS)
// Block by block, each channel's k steps go down its strip (stride 16).
template <class T>
void pack_strips(const T* w, int64_t out_features, int64_t in_features, T* packed) {
  const int64_t panels = num_panels64(out_features);
#pragma omp parallel for
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k0 = 0; k0 < in_features; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, in_features - k0);
      T* block = packed + (p * in_features + k0) * kPanels64Width;
      for (int64_t col = 0; col < kPanels64Width; ++col) {
        const int64_t n = p * kPanels64Width + col;
        T* dst = block + (col / 16) * depth * 16 + col % 16;
        const T* src = w + n * in_features + k0;
        for (int64_t k = 0; k < depth; ++k) dst[k * 16] = n < out_features ? src[k] : T{0};
      }
    }
}
#endif

}  // namespace

size_t panels64_scratch_size(int num_threads) {
  return static_cast<size_t>(std::max(1, num_threads)) * kDepth * kPanels64Width;
}

int64_t panels64_offset(int64_t n, int64_t k, int64_t in_features) {
  const int64_t p = n / kPanels64Width, col = n % kPanels64Width;
#if defined(LLMK_PANELS64_STRIPS)
  const int64_t k0 = k / kDepth * kDepth, depth = std::min(kDepth, in_features - k0);
  return (p * in_features + k0) * kPanels64Width + (col / 16) * depth * 16 + (k - k0) * 16 + col % 16;
#else
  return (p * in_features + k) * kPanels64Width + col;
#endif
}

// The [k][64] builds use the plain panel packer panels16 shares (kernels/cpu/linear.hpp).
#if defined(LLMK_PANELS64_STRIPS)
void pack_panels64(const float* w, int64_t out_features, int64_t in_features, float* packed) {
  pack_strips(w, out_features, in_features, packed);
}
void pack_panels64(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed) {
  pack_strips(w, out_features, in_features, packed);
}
#else
void pack_panels64(const float* w, int64_t out_features, int64_t in_features, float* packed) {
  pack_panels(w, out_features, in_features, kPanels64Width, packed);
}
void pack_panels64(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed) {
  pack_panels(w, out_features, in_features, kPanels64Width, packed);
}
#endif

#if defined(__AVX512F__)

namespace {

struct WidenF32 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
};
struct WidenBF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
};
struct WidenF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};

// c[m, 0:64] (+)= sum_k x[m, k] * b[k, 0:64] for MR rows over depth k.
// x: [MR, depth] (stride ldx); b: [depth, 64]; c: [MR, 64] (stride ldc), only
// the first num_cols columns are read and written. No software prefetch when
// streaming (decode): on a 2-core Zen 4, F32 llama-110m decoded at the same
// or a higher fraction of the read bandwidth without the lines asked for 32
// KiB ahead (9 of 11 alternating pairs of runs), as in the BF16 pairs' tile.
template <class B, int MR>
inline void micro_tile(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  zero_tile<MR>(acc);
  for (int64_t k = 0; k < depth; ++k) {
    const typename B::T* bk = b + k * kPanels64Width;
    const __m512 b0 = B::load(bk), b1 = B::load(bk + 16), b2 = B::load(bk + 32), b3 = B::load(bk + 48);
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * ldx + k]);
      acc[m][0] = _mm512_fmadd_ps(xv, b0, acc[m][0]);
      acc[m][1] = _mm512_fmadd_ps(xv, b1, acc[m][1]);
      acc[m][2] = _mm512_fmadd_ps(xv, b2, acc[m][2]);
      acc[m][3] = _mm512_fmadd_ps(xv, b3, acc[m][3]);
    }
  }
  store_tile<MR>(acc, c, ldc, accumulate, num_cols);
}

template <class B>
void tile_rows(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
               int64_t num_rows, bool accumulate, int num_cols) {
  for_row_tiles(num_rows, [&](auto rows_tag, int64_t m) {
    micro_tile<B, decltype(rows_tag)::value>(x + m * ldx, ldx, b, depth, c + m * ldc, ldc, accumulate, num_cols);
  });
}

template <class B>
void panels_range(const float* x, const typename B::T* packed, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
                  int64_t p_begin, int64_t p_end, float* block) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int num_cols = static_cast<int>(std::min<int64_t>(kPanels64Width, n_out - p * kPanels64Width));
    for (int64_t k0 = 0; k0 < k_len; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, k_len - k0);
      const typename B::T* src = packed + (p * k_len + k0) * kPanels64Width;
      float* c = y + p * kPanels64Width;
      if (num_rows >= kConvertRows && !std::is_same_v<typename B::T, float>) {
        // Widen the block once; every row group then reads plain floats.
        for (int64_t i = 0; i < depth * kPanels64Width; i += 16) _mm512_storeu_ps(block + i, B::load(src + i));
        tile_rows<WidenF32>(x + k0, k_len, block, depth, c, n_out, num_rows, k0 > 0, num_cols);
      } else {
        tile_rows<B>(x + k0, k_len, src, depth, c, n_out, num_rows, k0 > 0, num_cols);
      }
    }
  }
}

}  // namespace

#elif defined(__AVX2__) && defined(__FMA__)

// AVX2 has 16 vector registers of 8 floats: a tile covers MR rows x one
// strip of 16 columns (two vectors, 2 MR <= 12 accumulators), and the
// panels come as strips ([4][depth][16] per block of depth k steps,
// kernels/cpu/linear_panels64.hpp), so a tile reads its weights contiguous.

namespace {

struct WidenF32 {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};
struct WidenBF16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
};
struct WidenF16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

// c[m, 0:16] (+)= sum_k x[m, k] * strip[k, 0:16] for MR rows over depth k.
// x: [MR, depth] (stride ldx); strip: [depth][16]; c: [MR, 16] (stride ldc),
// only the first num_cols columns are read and written. Every row count sums
// a row's products in the same order, so a row gets the same bits alone
// (decode) and among others (prefill). Stream: the weights come from memory
// once (decode), so each k step asks for the line 128 steps ahead.
template <class B, int MR, bool Stream = false>
inline void strip_tile(const float* x, int64_t ldx, const typename B::T* strip, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m256 acc[MR][2];
  LLMK_UNROLL for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  constexpr int kStepBytes = static_cast<int>(sizeof(typename B::T)) * 16;
  // Two k steps per loop trip: 3.2% fewer CPU samples in F32 prefill on a
  // 2-core Zen 3 (fewer in 5 of 6 alternating runs), decode unchanged within
  // the noise (five pairs); the sums' order is the same.
#pragma GCC unroll 2
  for (int64_t k = 0; k < depth; ++k) {
    const typename B::T* bk = strip + k * 16;
    if (Stream && (kStepBytes >= 64 || k % 2 == 0)) {
      // Past this strip's end the line is the next strip's (a panel is read front to back).
      _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * 16), _MM_HINT_T0);
    }
    const __m256 b0 = B::load(bk), b1 = B::load(bk + 8);
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * ldx + k);
      acc[m][0] = _mm256_fmadd_ps(xv, b0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(xv, b1, acc[m][1]);
    }
  }
  LLMK_UNROLL for (int j = 0; j < 2; ++j) {
    const int valid = num_cols - 8 * j;
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      if (valid <= 0) continue;
      float* cp = c + m * ldc + 8 * j;
      __m256 v = acc[m][j];
      if (accumulate) v = _mm256_add_ps(v, load8(cp, valid));
      store8(cp, v, valid);
    }
  }
}

// Every row over one block (four strips of `depth` k steps, strip s at
// strips + s * depth * 16): strips outermost, so one strip stays in L1 while
// every row tile passes over it, the rows in tiles of at most 6
// (for_row_tiles: a tile of one or two rows in a many-row product would wait
// on the FMA latency, not the weights). One or two rows alone are decode:
// the panel streams from memory.
template <class B>
void tile_rows(const float* x, int64_t ldx, const typename B::T* strips, int64_t depth, float* c, int64_t ldc,
               int64_t num_rows, bool accumulate, int num_cols) {
  const int64_t strip_elems = depth * 16;
  for (int s = 0; s < kPanels64Width && s < num_cols; s += 16) {
    const typename B::T* strip = strips + (s / 16) * strip_elems;
    if (num_rows == 2) strip_tile<B, 2, true>(x, ldx, strip, depth, c + s, ldc, accumulate, num_cols - s);
    else if (num_rows == 1) strip_tile<B, 1, true>(x, ldx, strip, depth, c + s, ldc, accumulate, num_cols - s);
    else
      for_row_tiles(num_rows, [&](auto rows_tag, int64_t m) {
        strip_tile<B, decltype(rows_tag)::value>(x + m * ldx, ldx, strip, depth, c + m * ldc + s, ldc, accumulate,
                                                 num_cols - s);
      });
  }
}

template <class B>
void panels_range(const float* x, const typename B::T* packed, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
                  int64_t p_begin, int64_t p_end, float* block) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int num_cols = static_cast<int>(std::min<int64_t>(kPanels64Width, n_out - p * kPanels64Width));
    for (int64_t k0 = 0; k0 < k_len; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, k_len - k0);
      const typename B::T* src = packed + (p * k_len + k0) * kPanels64Width;  // the block's four strips
      float* c = y + p * kPanels64Width;
      if (num_rows >= kConvertRows && !std::is_same_v<typename B::T, float>) {
        // Widen the block to f32 once (same order); every row group then reads floats.
        for (int64_t i = 0; i < depth * kPanels64Width; i += 8) _mm256_storeu_ps(block + i, B::load(src + i));
        tile_rows<WidenF32>(x + k0, k_len, block, depth, c, n_out, num_rows, k0 > 0, num_cols);
      } else {
        tile_rows<B>(x + k0, k_len, src, depth, c, n_out, num_rows, k0 > 0, num_cols);
      }
    }
  }
}

}  // namespace

#endif

// The vector builds share the split over panels and the entry point.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

namespace {

template <class B>
void dispatch(const float* x, const typename B::T* packed, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
              int num_threads, float* scratch) {
  for_panel_ranges(num_panels64(n_out), num_threads, num_rows * k_len * n_out,
                   [&](int64_t p_begin, int64_t p_end, int t) {
                     panels_range<B>(x, packed, y, num_rows, k_len, n_out, p_begin, p_end,
                                     scratch + static_cast<int64_t>(t) * kDepth * kPanels64Width);
                   });
}

}  // namespace

bool linear_panels64(const float* x, int64_t num_rows, int64_t in_features, const void* packed, llmk_dtype w_dtype,
                     int64_t out_features, float* y, float* scratch, int num_threads) {
  const auto* h = static_cast<const uint16_t*>(packed);
  if (w_dtype == LLMK_DTYPE_F16) dispatch<WidenF16>(x, h, y, num_rows, in_features, out_features, num_threads, scratch);
  else if (w_dtype == LLMK_DTYPE_BF16) dispatch<WidenBF16>(x, h, y, num_rows, in_features, out_features, num_threads, scratch);
  else if (w_dtype == LLMK_DTYPE_F32)
    dispatch<WidenF32>(x, static_cast<const float*>(packed), y, num_rows, in_features, out_features, num_threads, scratch);
  else return false;
  return true;
}


#else  // portable fallback

bool linear_panels64(const float* x, int64_t num_rows, int64_t in_features, const void* packed_any,
                     llmk_dtype w_dtype, int64_t out_features, float* y, float*, int) {
  if (w_dtype != LLMK_DTYPE_F16 && w_dtype != LLMK_DTYPE_BF16 && w_dtype != LLMK_DTYPE_F32) return false;
  const auto* packed = static_cast<const uint16_t*>(packed_any);
  const auto* packed_f32 = static_cast<const float*>(packed_any);
  for (int64_t m = 0; m < num_rows; ++m)
    for (int64_t n = 0; n < out_features; ++n) {
      float sum = 0.0f;
      for (int64_t k = 0; k < in_features; ++k) {
        float w;
        const int64_t at = panels64_offset(n, k, in_features);
        const uint16_t bits = w_dtype == LLMK_DTYPE_F32 ? 0 : packed[at];
        if (w_dtype == LLMK_DTYPE_F32) w = packed_f32[at];
        else if (w_dtype == LLMK_DTYPE_F16) f16_to_f32(&bits, &w, 1);
        else bf16_to_f32(&bits, &w, 1);
        sum += x[m * in_features + k] * w;
      }
      y[m * out_features + n] = sum;
    }
  return true;
}

#endif

}  // namespace llmk::kernels::cpu
