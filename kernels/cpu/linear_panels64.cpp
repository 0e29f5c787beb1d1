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

namespace llmk::kernels::cpu {

namespace {

constexpr int64_t kDepth = 256;      // k steps per block: a converted panel block is 64 KiB of f32 (L2)
constexpr int64_t kConvertRows = 12; // from this many rows on, a block is widened to f32 once and reused

}  // namespace

size_t panels64_scratch_size(int num_threads) {
  return static_cast<size_t>(std::max(1, num_threads)) * kDepth * kPanels64Width;
}

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
// the first num_cols columns are read and written.
template <class B, int MR>
inline void micro_tile(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  zero_tile<MR>(acc);
  for (int64_t k = 0; k < depth; ++k) {
    const typename B::T* bk = b + k * kPanels64Width;
    if (MR <= 2) {  // streaming (decode): ask for the weights 128 steps ahead
      _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanels64Width), _MM_HINT_T0);
      if (sizeof(typename B::T) == 4) _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanels64Width) + 64, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanels64Width) + sizeof(typename B::T) * 32, _MM_HINT_T0);
      if (sizeof(typename B::T) == 4) _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanels64Width) + 192, _MM_HINT_T0);
    }
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
  int64_t m = 0;
  for (; m + kTileRows <= num_rows; m += kTileRows)
    micro_tile<B, kTileRows>(x + m * ldx, ldx, b, depth, c + m * ldc, ldc, accumulate, num_cols);
  const float* xr = x + m * ldx;
  float* cr = c + m * ldc;
  switch (num_rows - m) {
    case 5: micro_tile<B, 5>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 4: micro_tile<B, 4>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 3: micro_tile<B, 3>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 2: micro_tile<B, 2>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 1: micro_tile<B, 1>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    default: break;
  }
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

// AVX2 has 16 vector registers of 8 floats: a tile covers MR rows x NV
// vectors (8 NV columns) of a panel with MR * NV <= 12 accumulators, and a
// panel's 64 columns take 8 / NV such strips (the strips after the first
// read the block from cache).

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

// c[m, 0:8 NV] (+)= sum_k x[m, k] * b[k, 0:8 NV] for MR rows over depth k.
// x: [MR, depth] (stride ldx); b: one strip of [depth, LDB] (a panel's, or a
// repacked strip's); c: [MR, 8 NV] (stride ldc), only the first num_cols
// columns are read and written.
template <class B, int MR, int NV, int64_t LDB = kPanels64Width>
inline void micro_tile(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m256 acc[MR][NV];
  LLMK_UNROLL for (int m = 0; m < MR; ++m)
    LLMK_UNROLL for (int j = 0; j < NV; ++j) acc[m][j] = _mm256_setzero_ps();
  constexpr int kStripBytes = static_cast<int>(sizeof(typename B::T)) * 8 * NV;
  for (int64_t k = 0; k < depth; ++k) {
    const typename B::T* bk = b + k * LDB;
    if (MR <= 2 && LDB == kPanels64Width) {  // streaming from a panel (decode): ask for the weights 128 steps ahead
      const char* ahead = reinterpret_cast<const char*>(bk + 128 * LDB);
      LLMK_UNROLL for (int off = 0; off < kStripBytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    __m256 bv[NV];
    LLMK_UNROLL for (int j = 0; j < NV; ++j) bv[j] = B::load(bk + 8 * j);
    LLMK_UNROLL for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * ldx + k);
      LLMK_UNROLL for (int j = 0; j < NV; ++j) acc[m][j] = _mm256_fmadd_ps(xv, bv[j], acc[m][j]);
    }
  }
  LLMK_UNROLL for (int j = 0; j < NV; ++j) {
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

// The 64 columns of a panel as strips of 8 NV columns.
template <class B, int MR, int NV>
inline void strips(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
                   bool accumulate, int num_cols) {
  for (int s = 0; s < kPanels64Width && s < num_cols; s += 8 * NV)
    micro_tile<B, MR, NV>(x, ldx, b + s, depth, c + s, ldc, accumulate, num_cols - s);
}

// Rows in 6-row groups (and the rest) over one block of a panel, its columns
// as strips of 16: read in place (stride 64 per k step), or, from
// kConvertRows rows on, from strips the caller repacked into scratch
// ([4][depth][16] floats, strip s at strips + s * depth * 16), the rows past
// the last 6-row group included. In place, the
// 256 lines of a strip fall 256 bytes apart, on a quarter of L1's sets, and
// do not stay there while the 6-row groups pass over them; a repacked strip
// is 16 KiB in a row.
template <class B>
void tile_rows(const float* x, int64_t ldx, const typename B::T* b, const float* strips_f32, int64_t depth, float* c,
               int64_t ldc, int64_t num_rows, bool accumulate, int num_cols) {
  // Strips outermost: one 16-column strip stays in L1 while every 6-row group passes over it.
  const int64_t full_rows = num_rows / 6 * 6;
  for (int s = 0; s < kPanels64Width && s < num_cols; s += 16)
    for (int64_t m = 0; m < full_rows; m += 6) {
      if (strips_f32 != nullptr)
        micro_tile<WidenF32, 6, 2, 16>(x + m * ldx, ldx, strips_f32 + (s / 16) * depth * 16, depth, c + m * ldc + s, ldc,
                                       accumulate, num_cols - s);
      else
        micro_tile<B, 6, 2>(x + m * ldx, ldx, b + s, depth, c + m * ldc + s, ldc, accumulate, num_cols - s);
    }
  const int64_t m = full_rows;
  const float* xr = x + m * ldx;
  float* cr = c + m * ldc;
  if (strips_f32 != nullptr && m < num_rows) {  // the rest of the rows from the same repacked strips
    for (int s = 0; s < kPanels64Width && s < num_cols; s += 16) {
      const float* strip = strips_f32 + (s / 16) * depth * 16;
      switch (num_rows - m) {
        case 5: micro_tile<WidenF32, 5, 2, 16>(xr, ldx, strip, depth, cr + s, ldc, accumulate, num_cols - s); break;
        case 4: micro_tile<WidenF32, 4, 2, 16>(xr, ldx, strip, depth, cr + s, ldc, accumulate, num_cols - s); break;
        case 3: micro_tile<WidenF32, 3, 2, 16>(xr, ldx, strip, depth, cr + s, ldc, accumulate, num_cols - s); break;
        case 2: micro_tile<WidenF32, 2, 2, 16>(xr, ldx, strip, depth, cr + s, ldc, accumulate, num_cols - s); break;
        default: micro_tile<WidenF32, 1, 2, 16>(xr, ldx, strip, depth, cr + s, ldc, accumulate, num_cols - s); break;
      }
    }
    return;
  }
  switch (num_rows - m) {
    case 5: strips<B, 5, 2>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 4: strips<B, 4, 2>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 3: strips<B, 3, 4>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 2: strips<B, 2, 4>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    case 1: strips<B, 1, 8>(xr, ldx, b, depth, cr, ldc, accumulate, num_cols); break;
    default: break;
  }
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
      if (num_rows >= kConvertRows) {
        // Repack the block once as contiguous f32 strips (widened from F16
        // or BF16); the 6-row groups then read those.
        for (int64_t k = 0; k < depth; ++k)
          LLMK_UNROLL for (int v = 0; v < kPanels64Width / 8; ++v)
            _mm256_storeu_ps(block + ((v / 2) * depth + k) * 16 + 8 * (v % 2), B::load(src + k * kPanels64Width + 8 * v));
        tile_rows<B>(x + k0, k_len, src, block, depth, c, n_out, num_rows, k0 > 0, num_cols);
      } else {
        tile_rows<B>(x + k0, k_len, src, nullptr, depth, c, n_out, num_rows, k0 > 0, num_cols);
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
      const int64_t p = n / kPanels64Width, j = n % kPanels64Width;
      float sum = 0.0f;
      for (int64_t k = 0; k < in_features; ++k) {
        float w;
        const int64_t at = (p * in_features + k) * kPanels64Width + j;
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
