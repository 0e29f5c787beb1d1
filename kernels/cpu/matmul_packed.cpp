#include "kernels/cpu/matmul_packed.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/vec_math.hpp"  // also silences GCC 12's false uninitialized warnings in intrinsics

namespace llmk::kernels::cpu {

namespace {

constexpr int64_t kDepth = 256;      // k steps per block: a converted panel block is 64 KiB of f32 (L2)
constexpr int kRows = 6;             // activation rows per micro-tile (6 x 64 outputs = 24 accumulators)
constexpr int64_t kConvertRows = 12; // from this many rows on, a block is widened to f32 once and reused

int64_t num_panels(int64_t n) { return (n + kPanelCols - 1) / kPanelCols; }

}  // namespace

int64_t packed_panels_size(int64_t out_features, int64_t in_features) {
  return num_panels(out_features) * kPanelCols * in_features;
}

namespace {

template <class T>
void pack_panels_impl(const T* w, T* packed, int64_t out_features, int64_t in_features) {
  const int64_t panels = num_panels(out_features);
#pragma omp parallel for
  for (int64_t p = 0; p < panels; ++p) {
    T* dst = packed + p * kPanelCols * in_features;
    for (int64_t j = 0; j < kPanelCols; ++j) {
      const int64_t n = p * kPanelCols + j;
      if (n >= out_features) {
        for (int64_t k = 0; k < in_features; ++k) dst[k * kPanelCols + j] = 0;
        continue;
      }
      const T* src = w + n * in_features;
      for (int64_t k = 0; k < in_features; ++k) dst[k * kPanelCols + j] = src[k];
    }
  }
}

}  // namespace

void pack_panels(const uint16_t* w, uint16_t* packed, int64_t out_features, int64_t in_features) {
  pack_panels_impl(w, packed, out_features, in_features);
}

void pack_panels(const float* w, float* packed, int64_t out_features, int64_t in_features) {
  pack_panels_impl(w, packed, out_features, in_features);
}

int64_t matmul_packed_scratch_floats(int num_threads) {
  return static_cast<int64_t>(std::max(1, num_threads)) * kDepth * kPanelCols;
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

// c[m, 0:64] (+)= acc[m] for MR rows; only the first num_cols columns.
template <int MR>
inline void store_tile(const __m512 (&acc)[MR][4], float* c, int64_t ldc, bool accumulate, int num_cols) {
  for (int j = 0; j < 4; ++j) {
    const int valid = std::clamp(num_cols - 16 * j, 0, 16);
    if (valid == 0) break;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    for (int m = 0; m < MR; ++m) {
      float* cp = c + m * ldc + 16 * j;
      __m512 v = acc[m][j];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cp));
      _mm512_mask_storeu_ps(cp, mask, v);
    }
  }
}

// c[m, 0:64] (+)= sum_k x[m, k] * b[k, 0:64] for MR rows over depth k.
// x: [MR, depth] (stride ldx); b: [depth, 64]; c: [MR, 64] (stride ldc), only
// the first num_cols columns are read and written.
template <class B, int MR>
inline void micro_tile(const float* x, int64_t ldx, const typename B::T* b, int64_t depth, float* c, int64_t ldc,
                       bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    const typename B::T* bk = b + k * kPanelCols;
    if (MR <= 2) {  // streaming (decode): ask for the weights 128 steps ahead
      _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanelCols), _MM_HINT_T0);
      if (sizeof(typename B::T) == 4) _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanelCols) + 64, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanelCols) + sizeof(typename B::T) * 32, _MM_HINT_T0);
      if (sizeof(typename B::T) == 4) _mm_prefetch(reinterpret_cast<const char*>(bk + 128 * kPanelCols) + 192, _MM_HINT_T0);
    }
    const __m512 b0 = B::load(bk), b1 = B::load(bk + 16), b2 = B::load(bk + 32), b3 = B::load(bk + 48);
    for (int m = 0; m < MR; ++m) {
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
  for (; m + kRows <= num_rows; m += kRows)
    micro_tile<B, kRows>(x + m * ldx, ldx, b, depth, c + m * ldc, ldc, accumulate, num_cols);
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
    const int num_cols = static_cast<int>(std::min<int64_t>(kPanelCols, n_out - p * kPanelCols));
    for (int64_t k0 = 0; k0 < k_len; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, k_len - k0);
      const typename B::T* src = packed + (p * k_len + k0) * kPanelCols;
      float* c = y + p * kPanelCols;
      if (num_rows >= kConvertRows && !std::is_same_v<typename B::T, float>) {
        // Widen the block once; every row group then reads plain floats.
        for (int64_t i = 0; i < depth * kPanelCols; i += 16) _mm512_storeu_ps(block + i, B::load(src + i));
        tile_rows<WidenF32>(x + k0, k_len, block, depth, c, n_out, num_rows, k0 > 0, num_cols);
      } else {
        tile_rows<B>(x + k0, k_len, src, depth, c, n_out, num_rows, k0 > 0, num_cols);
      }
    }
  }
}

template <class B>
void dispatch(const float* x, const typename B::T* packed, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
              int num_threads, float* scratch) {
  const int64_t panels = num_panels(n_out);
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), panels));
  if (threads == 1 || num_rows * k_len * n_out < (1 << 18)) {
    panels_range<B>(x, packed, y, num_rows, k_len, n_out, 0, panels, scratch);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    panels_range<B>(x, packed, y, num_rows, k_len, n_out, panels * t / nt, panels * (t + 1) / nt,
                    scratch + static_cast<int64_t>(t) * kDepth * kPanelCols);
  }
}

}  // namespace

bool matmul_packed(const float* x, const void* packed, llmk_dtype w_dtype, float* y, int64_t num_rows,
                   int64_t in_features, int64_t out_features, int num_threads, float* scratch) {
  const auto* h = static_cast<const uint16_t*>(packed);
  if (w_dtype == LLMK_DTYPE_F16) dispatch<WidenF16>(x, h, y, num_rows, in_features, out_features, num_threads, scratch);
  else if (w_dtype == LLMK_DTYPE_BF16) dispatch<WidenBF16>(x, h, y, num_rows, in_features, out_features, num_threads, scratch);
  else if (w_dtype == LLMK_DTYPE_F32)
    dispatch<WidenF32>(x, static_cast<const float*>(packed), y, num_rows, in_features, out_features, num_threads, scratch);
  else return false;
  return true;
}

#else  // portable fallback

bool matmul_packed(const float* x, const void* packed_any, llmk_dtype w_dtype, float* y, int64_t num_rows,
                   int64_t in_features, int64_t out_features, int num_threads, float* scratch) {
  if (w_dtype != LLMK_DTYPE_F16 && w_dtype != LLMK_DTYPE_BF16 && w_dtype != LLMK_DTYPE_F32) return false;
  const auto* packed = static_cast<const uint16_t*>(packed_any);
  const auto* packed_f32 = static_cast<const float*>(packed_any);
  for (int64_t m = 0; m < num_rows; ++m)
    for (int64_t n = 0; n < out_features; ++n) {
      const int64_t p = n / kPanelCols, j = n % kPanelCols;
      float sum = 0.0f;
      for (int64_t k = 0; k < in_features; ++k) {
        float w;
        const int64_t at = (p * in_features + k) * kPanelCols + j;
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


int64_t bf16_row_stride(int64_t in_features) { return (in_features + 1) & ~int64_t{1}; }

#if defined(__AVX512BF16__)

namespace {

// [depth][64] BF16 panel rows -> [ceil(depth / 2)][64][2]: for each pair of
// k steps, column c's two weights side by side, so one 32-bit lane holds what
// one dot-product lane multiplies. Vector j of a pair row covers columns
// 16j .. 16j + 15. An odd last step pairs with zero.
void interleave_pairs(const uint16_t* src, int64_t depth, uint16_t* dst) {
  alignas(64) uint16_t lo_idx[32], hi_idx[32];
  for (int i = 0; i < 16; ++i) {
    lo_idx[2 * i] = static_cast<uint16_t>(i);
    lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
    hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  for (int64_t k = 0; k < depth; k += 2) {
    const uint16_t* a = src + k * kPanelCols;
    uint16_t* d = dst + k * kPanelCols;
    for (int h = 0; h < 2; ++h) {
      const __m512i va = _mm512_loadu_si512(a + 32 * h);
      const __m512i vb = k + 1 < depth ? _mm512_loadu_si512(a + kPanelCols + 32 * h) : _mm512_setzero_si512();
      _mm512_storeu_si512(d + 64 * h, _mm512_permutex2var_epi16(va, lo, vb));
      _mm512_storeu_si512(d + 64 * h + 32, _mm512_permutex2var_epi16(va, hi, vb));
    }
  }
}

// As micro_tile, over pairs of k steps: x in BF16 pairs (stride ldx in
// elements), b interleaved by interleave_pairs.
template <int MR>
inline void micro_tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* b, int64_t pairs, float* c, int64_t ldc,
                            bool accumulate, int num_cols) {
  __m512 acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* bp = b + p * 2 * kPanelCols;
    const auto b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 32);
    const auto b2 = (__m512bh)_mm512_loadu_si512(bp + 64), b3 = (__m512bh)_mm512_loadu_si512(bp + 96);
    for (int m = 0; m < MR; ++m) {
      int32_t pair;
      std::memcpy(&pair, x + m * ldx + 2 * p, sizeof(pair));
      const auto xv = (__m512bh)_mm512_set1_epi32(pair);
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xv, b0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xv, b1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], xv, b2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], xv, b3);
    }
  }
  store_tile<MR>(acc, c, ldc, accumulate, num_cols);
}

void tile_rows_bf16(const uint16_t* x, int64_t ldx, const uint16_t* b, int64_t pairs, float* c, int64_t ldc,
                    int64_t num_rows, bool accumulate, int num_cols) {
  int64_t m = 0;
  for (; m + kRows <= num_rows; m += kRows)
    micro_tile_bf16<kRows>(x + m * ldx, ldx, b, pairs, c + m * ldc, ldc, accumulate, num_cols);
  const uint16_t* xr = x + m * ldx;
  float* cr = c + m * ldc;
  switch (num_rows - m) {
    case 5: micro_tile_bf16<5>(xr, ldx, b, pairs, cr, ldc, accumulate, num_cols); break;
    case 4: micro_tile_bf16<4>(xr, ldx, b, pairs, cr, ldc, accumulate, num_cols); break;
    case 3: micro_tile_bf16<3>(xr, ldx, b, pairs, cr, ldc, accumulate, num_cols); break;
    case 2: micro_tile_bf16<2>(xr, ldx, b, pairs, cr, ldc, accumulate, num_cols); break;
    case 1: micro_tile_bf16<1>(xr, ldx, b, pairs, cr, ldc, accumulate, num_cols); break;
    default: break;
  }
}

void panels_range_bf16(const uint16_t* x, const uint16_t* packed, float* y, int64_t num_rows, int64_t k_len,
                       int64_t n_out, int64_t p_begin, int64_t p_end, uint16_t* block) {
  const int64_t ldx = bf16_row_stride(k_len);
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int num_cols = static_cast<int>(std::min<int64_t>(kPanelCols, n_out - p * kPanelCols));
    for (int64_t k0 = 0; k0 < k_len; k0 += kDepth) {  // kDepth is even: pairs never straddle blocks
      const int64_t depth = std::min(kDepth, k_len - k0);
      interleave_pairs(packed + (p * k_len + k0) * kPanelCols, depth, block);
      tile_rows_bf16(x + k0, ldx, block, (depth + 1) / 2, y + p * kPanelCols, n_out, num_rows, k0 > 0, num_cols);
    }
  }
}

}  // namespace

bool matmul_packed_bf16_dot(const float* x, const uint16_t* packed, float* y, int64_t num_rows, int64_t in_features,
                            int64_t out_features, int num_threads, float* scratch, uint16_t* x_bf16) {
  const int64_t ldx = bf16_row_stride(in_features);
  for (int64_t m = 0; m < num_rows; ++m) {
    f32_to_bf16(x + m * in_features, x_bf16 + m * ldx, in_features);
    if (ldx != in_features) x_bf16[m * ldx + in_features] = 0;  // the odd step's partner
  }
  const int64_t panels = num_panels(out_features);
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), panels));
  // A thread's scratch (kDepth x 64 floats) holds its interleaved block (kDepth x 64 BF16, rounded up to pairs).
  auto* blocks = reinterpret_cast<uint16_t*>(scratch);
  const int64_t block_elems = 2 * kDepth * kPanelCols;
  if (threads == 1 || num_rows * in_features * out_features < (1 << 18)) {
    panels_range_bf16(x_bf16, packed, y, num_rows, in_features, out_features, 0, panels, blocks);
    return true;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    panels_range_bf16(x_bf16, packed, y, num_rows, in_features, out_features, panels * t / nt,
                      panels * (t + 1) / nt, blocks + static_cast<int64_t>(t) * block_elems);
  }
  return true;
}

#else

bool matmul_packed_bf16_dot(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t, int, float*,
                            uint16_t*) {
  return false;
}

#endif

}  // namespace llmk::kernels::cpu
