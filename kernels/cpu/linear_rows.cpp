#include "kernels/cpu/linear_rows.hpp"

#include "kernels/cpu/linear_tile.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/vec_math.hpp"  // also silences GCC 12's false uninitialized warnings in intrinsics

namespace llmk::kernels::cpu {

namespace {

#if defined(__AVX512F__)

// 16 consecutive weights as floats; `mask` selects the valid lanes of a tail.
struct LoadF32 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const uint16_t* p, __mmask16 mask) { return widen(_mm256_maskz_loadu_epi16(mask, p)); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const uint16_t* p, __mmask16 mask) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p)); }
};

// y[m, r] for MB activation rows and R weight rows.
// x: [MB, k_len] (stride ldx); w: [R, k_len] (stride k_len); y: [MB, R] (stride ldy).
template <class L, int R, int MB>
inline void tile(const float* x, int64_t ldx, const typename L::T* w, int64_t k_len, float* y, int64_t ldy) {
  __m512 acc[MB][R];
  LLMK_UNROLL for (int m = 0; m < MB; ++m)
    LLMK_UNROLL for (int r = 0; r < R; ++r) acc[m][r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= k_len; k += 16) {
    __m512 wv[R];
    LLMK_UNROLL for (int r = 0; r < R; ++r) wv[r] = L::load(w + r * k_len + k);
    LLMK_UNROLL for (int m = 0; m < MB; ++m) {
      const __m512 xv = _mm512_loadu_ps(x + m * ldx + k);
      LLMK_UNROLL for (int r = 0; r < R; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  if (k < k_len) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k_len - k)) - 1u);
    __m512 wv[R];
    LLMK_UNROLL for (int r = 0; r < R; ++r) wv[r] = L::load(w + r * k_len + k, mask);
    LLMK_UNROLL for (int m = 0; m < MB; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + m * ldx + k);
      LLMK_UNROLL for (int r = 0; r < R; ++r) acc[m][r] = _mm512_fmadd_ps(xv, wv[r], acc[m][r]);
    }
  }
  LLMK_UNROLL for (int m = 0; m < MB; ++m)
    LLMK_UNROLL for (int r = 0; r < R; ++r) y[m * ldy + r] = _mm512_reduce_add_ps(acc[m][r]);
}

// Rows [n_begin, n_end) of the output for all activation rows.
template <class L>
void rows_range(const float* x, const typename L::T* w, float* y, int64_t num_rows, int64_t k_len,
                  int64_t n_out, int64_t n_begin, int64_t n_end) {
  if (num_rows == 1) {
    int64_t n = n_begin;
    for (; n + 8 <= n_end; n += 8) tile<L, 8, 1>(x, k_len, w + n * k_len, k_len, y + n, n_out);
    for (; n < n_end; ++n) tile<L, 1, 1>(x, k_len, w + n * k_len, k_len, y + n, n_out);
    return;
  }
  // Blocked for the cache: a block of up to kRowBlock activation rows stays in
  // L2 while tiles of four weight rows pass over it; each weight tile stays
  // in L1 while every group of four activation rows of the block meets it.
  constexpr int64_t kRowBlock = 48;
  for (int64_t m0 = 0; m0 < num_rows; m0 += kRowBlock) {
    const int64_t m1 = std::min(num_rows, m0 + kRowBlock);
    int64_t n = n_begin;
    for (; n + 4 <= n_end; n += 4) {
      const typename L::T* wt = w + n * k_len;
      int64_t m = m0;
      for (; m + 4 <= m1; m += 4) tile<L, 4, 4>(x + m * k_len, k_len, wt, k_len, y + m * n_out + n, n_out);
      switch (m1 - m) {
        case 3: tile<L, 4, 3>(x + m * k_len, k_len, wt, k_len, y + m * n_out + n, n_out); break;
        case 2: tile<L, 4, 2>(x + m * k_len, k_len, wt, k_len, y + m * n_out + n, n_out); break;
        case 1: tile<L, 4, 1>(x + m * k_len, k_len, wt, k_len, y + m * n_out + n, n_out); break;
        default: break;
      }
    }
    for (; n < n_end; ++n)
      for (int64_t m = m0; m < m1; ++m)
        tile<L, 1, 1>(x + m * k_len, k_len, w + n * k_len, k_len, y + m * n_out + n, n_out);
  }
}

template <class L>
void rows_dispatch(const float* x, const void* w, float* y, int64_t num_rows, int64_t k_len, int64_t n_out,
                     int num_threads) {
  const auto* wt = static_cast<const typename L::T*>(w);
  const int64_t work = num_rows * k_len * n_out;
  const int threads = work < (1 << 18) ? 1 : std::max(1, num_threads);
  if (threads == 1) {
    rows_range<L>(x, wt, y, num_rows, k_len, n_out, 0, n_out);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    // Contiguous slices of the output in multiples of 8 rows.
    const int64_t num_slices = (n_out + 7) / 8;
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = std::min(n_out, num_slices * t / nt * 8);
    const int64_t end = std::min(n_out, num_slices * (t + 1) / nt * 8);
    if (begin < end) rows_range<L>(x, wt, y, num_rows, k_len, n_out, begin, end);
  }
}

#else  // portable fallback

template <class F>
void rows_generic(const float* x, F weight_at, float* y, int64_t num_rows, int64_t k_len, int64_t n_out) {
#pragma omp parallel for
  for (int64_t n = 0; n < n_out; ++n)
    for (int64_t m = 0; m < num_rows; ++m) {
      float sum = 0.0f;
      for (int64_t k = 0; k < k_len; ++k) sum += x[m * k_len + k] * weight_at(n * k_len + k);
      y[m * n_out + n] = sum;
    }
}

#endif

}  // namespace

bool linear_rows(const float* x, int64_t num_rows, int64_t in_features, const void* w, llmk_dtype w_dtype,
                 int64_t out_features, float* y, int num_threads) {
#if defined(__AVX512F__)
  switch (w_dtype) {
    case LLMK_DTYPE_F32: rows_dispatch<LoadF32>(x, w, y, num_rows, in_features, out_features, num_threads); return true;
    case LLMK_DTYPE_BF16: rows_dispatch<LoadBF16>(x, w, y, num_rows, in_features, out_features, num_threads); return true;
    case LLMK_DTYPE_F16: rows_dispatch<LoadF16>(x, w, y, num_rows, in_features, out_features, num_threads); return true;
    default: return false;
  }
#else
  const auto* h = static_cast<const uint16_t*>(w);
  switch (w_dtype) {
    case LLMK_DTYPE_F32: {
      const auto* f = static_cast<const float*>(w);
      rows_generic(x, [f](int64_t i) { return f[i]; }, y, num_rows, in_features, out_features);
      return true;
    }
    case LLMK_DTYPE_BF16:
      rows_generic(x, [h](int64_t i) { float f; bf16_to_f32(h + i, &f, 1); return f; }, y, num_rows, in_features, out_features);
      return true;
    case LLMK_DTYPE_F16:
      rows_generic(x, [h](int64_t i) { float f; f16_to_f32(h + i, &f, 1); return f; }, y, num_rows, in_features, out_features);
      return true;
    default: return false;
  }
#endif
}

}  // namespace llmk::kernels::cpu
