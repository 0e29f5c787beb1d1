#include "kernels/cpu/linear_wu8.hpp"

#if defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_* placeholders inside <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/linear_tile.hpp"

namespace llmk::kernels::cpu {

namespace {

#if defined(__AVX512F__)

inline __m512 load_u8_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

template <int C>
void gemv_tile_wu8(const float* x, float xsum, int64_t in_features, const uint8_t* packed, const float* scale,
                   const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  __m512 acc[C];
  LLMK_UNROLL for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const uint8_t* base = packed + p0 * in_features * kPanels16Width;
  for (int64_t k = 0; k < in_features; ++k) {
    const __m512 xk = _mm512_set1_ps(x[k]);
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      acc[c] = _mm512_fmadd_ps(load_u8_ps(base + (c * in_features + k) * kPanels16Width), xk, acc[c]);
  }
  const __m512 vsum = _mm512_set1_ps(xsum);
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = num_cols - c * kPanels16Width;
    if (cols <= 0) break;
    const int64_t at = (p0 + c) * kPanels16Width;
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(scale + at), _mm512_fnmadd_ps(load_u8_ps(zero + at), vsum, acc[c]));
    _mm512_mask_storeu_ps(y + c * kPanels16Width, tail_mask(cols), v);
  }
}

void dequantize_panel(int64_t in_features, const uint8_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const __m512 sc = _mm512_loadu_ps(scale + p * kPanels16Width);
  const __m512 z = load_u8_ps(zero + p * kPanels16Width);
  const uint8_t* base = packed + p * in_features * kPanels16Width;
  for (int64_t k = 0; k < in_features; ++k)
    _mm512_storeu_ps(out + k * kPanels16Width, _mm512_mul_ps(_mm512_sub_ps(load_u8_ps(base + k * kPanels16Width), z), sc));
}

#elif defined(__AVX2__) && defined(__FMA__)

inline __m256 load_u8_ps8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// C panels of 16 channels as two 8-channel halves: at most 8 accumulators.
template <int C>
void gemv_tile_wu8(const float* x, float xsum, int64_t in_features, const uint8_t* packed, const float* scale,
                   const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  __m256 acc[C][2];
  LLMK_UNROLL for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  const uint8_t* base = packed + p0 * in_features * kPanels16Width;
  for (int64_t k = 0; k < in_features; ++k) {
    const __m256 xk = _mm256_broadcast_ss(x + k);
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h)
        acc[c][h] = _mm256_fmadd_ps(load_u8_ps8(base + (c * in_features + k) * kPanels16Width + 8 * h), xk, acc[c][h]);
  }
  const __m256 vsum = _mm256_set1_ps(xsum);
  LLMK_UNROLL for (int c = 0; c < C; ++c)
    for (int h = 0; h < 2; ++h) {
      const int64_t cols = num_cols - c * kPanels16Width - 8 * h;
      if (cols <= 0) break;
      const int64_t at = (p0 + c) * kPanels16Width + 8 * h;
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(scale + at), _mm256_fnmadd_ps(load_u8_ps8(zero + at), vsum, acc[c][h]));
      store8(y + c * kPanels16Width + 8 * h, v, cols);
    }
}

void dequantize_panel(int64_t in_features, const uint8_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const uint8_t* base = packed + p * in_features * kPanels16Width;
  for (int h = 0; h < 2; ++h) {
    const __m256 sc = _mm256_loadu_ps(scale + p * kPanels16Width + 8 * h);
    const __m256 z = load_u8_ps8(zero + p * kPanels16Width + 8 * h);
    for (int64_t k = 0; k < in_features; ++k)
      _mm256_storeu_ps(out + k * kPanels16Width + 8 * h,
                       _mm256_mul_ps(_mm256_sub_ps(load_u8_ps8(base + k * kPanels16Width + 8 * h), z), sc));
  }
}

#else  // portable: the same tiles as arrays, 16 channels per loop

template <int C>
void gemv_tile_wu8(const float* x, float xsum, int64_t in_features, const uint8_t* packed, const float* scale,
                   const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  float acc[C][kPanels16Width] = {};
  const uint8_t* base = packed + p0 * in_features * kPanels16Width;
  for (int64_t k = 0; k < in_features; ++k)
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const uint8_t* q = base + (c * in_features + k) * kPanels16Width;
      for (int j = 0; j < kPanels16Width; ++j) acc[c][j] += static_cast<float>(q[j]) * x[k];
    }
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = std::min<int64_t>(num_cols - c * kPanels16Width, kPanels16Width);
    if (cols <= 0) break;
    const int64_t at = (p0 + c) * kPanels16Width;
    for (int64_t j = 0; j < cols; ++j)
      y[c * kPanels16Width + j] = scale[at + j] * (acc[c][j] - static_cast<float>(zero[at + j]) * xsum);
  }
}

void dequantize_panel(int64_t in_features, const uint8_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const float* sc = scale + p * kPanels16Width;
  const uint8_t* z = zero + p * kPanels16Width;
  const uint8_t* base = packed + p * in_features * kPanels16Width;
  for (int64_t k = 0; k < in_features; ++k)
    for (int j = 0; j < kPanels16Width; ++j)
      out[k * kPanels16Width + j] =
          (static_cast<float>(base[k * kPanels16Width + j]) - static_cast<float>(z[j])) * sc[j];
}

#endif

// Scale and zero point of the range [min(0, lo), max(0, hi)].
void range_params(double lo, double hi, float* scale, uint8_t* zero, double* inv, double* z) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  const double sc = (hi - lo) / 255.0;
  *z = sc > 0.0 ? std::clamp(std::nearbyint(-lo / sc), 0.0, 255.0) : 0.0;
  *inv = sc > 0.0 ? 1.0 / sc : 0.0;
  *scale = static_cast<float>(sc);
  *zero = static_cast<uint8_t>(*z);
}

}  // namespace

void pack_wu8(const float* w, int64_t out_features, int64_t in_features, bool per_channel,
              uint8_t* packed, float* scale, uint8_t* zero) {
  const int64_t padded_out = num_panels16(out_features) * kPanels16Width;
  double t_lo = 0.0, t_hi = 0.0;
  for (int64_t i = 0; i < out_features * in_features; ++i) {
    t_lo = std::min(t_lo, static_cast<double>(w[i]));
    t_hi = std::max(t_hi, static_cast<double>(w[i]));
  }
#pragma omp parallel for schedule(static)  // rows are independent: pack them in parallel at load
  for (int64_t n = 0; n < padded_out; ++n) {
    double lo = t_lo, hi = t_hi;
    if (per_channel) {
      lo = hi = 0.0;
      for (int64_t k = 0; n < out_features && k < in_features; ++k) {
        lo = std::min(lo, static_cast<double>(w[n * in_features + k]));
        hi = std::max(hi, static_cast<double>(w[n * in_features + k]));
      }
    }
    double inv = 0.0, z = 0.0;
    range_params(lo, hi, &scale[n], &zero[n], &inv, &z);
    for (int64_t k = 0; k < in_features; ++k) {
      const double v = n < out_features ? w[n * in_features + k] : 0.0;
      packed[((n / kPanels16Width) * in_features + k) * kPanels16Width + n % kPanels16Width] =
          static_cast<uint8_t>(std::clamp(std::nearbyint(v * inv) + z, 0.0, 255.0));
    }
  }
}

size_t wu8_scratch_size(int64_t in_features, int num_threads) {
  return dequantized_panels16_scratch_size(in_features, num_threads);
}

void linear_wu8(const float* x, int64_t num_rows, int64_t in_features, const uint8_t* packed, const float* scale,
                const uint8_t* zero, int64_t out_features, float* y, float* scratch, int num_threads) {
  if (num_rows == 1) {
    float xsum = 0.0f;
    for (int64_t k = 0; k < in_features; ++k) xsum += x[k];
    for_one_row_tiles(out_features, num_threads, [&](auto panels, int64_t p0, int64_t num_cols, int64_t n0) {
      gemv_tile_wu8<decltype(panels)::value>(x, xsum, in_features, packed, scale, zero, p0, num_cols, y + n0);
    });
    return;
  }
  linear_dequantized_panels16(
      x, num_rows, in_features,
      [&](int64_t p, float* out) { dequantize_panel(in_features, packed, scale, zero, p, out); }, out_features, y,
      scratch, num_threads);
}

}  // namespace llmk::kernels::cpu
