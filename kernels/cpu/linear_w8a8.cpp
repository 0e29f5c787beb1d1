#include "kernels/cpu/linear_w8a8.hpp"

// The AVX-512 path needs VNNI (vpdpbusd) and DQ besides AVX-512F; AVX2
// builds, and AVX-512 builds without VNNI (the x86-64-v4 CPU level), take the
// AVX2 path below it; other builds the portable one.
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512DQ__)
#define LLMK_W8A8_VNNI 1
#elif defined(__AVX2__) && defined(__FMA__)
#define LLMK_W8A8_AVX2 1  // its helpers in linear_tile.hpp
#endif

#if defined(LLMK_W8A8_VNNI)
// GCC 12 reports its own _mm512_undefined_* placeholders inside <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#elif defined(LLMK_W8A8_AVX2)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/work_shares.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace llmk::kernels::cpu {

namespace {

constexpr int kMaxRows = 4;
constexpr int kMaxPanels = 4;
constexpr int64_t kPanelBytes = 64;  // one vpdpbusd operand: 16 channels x 4 k

#if defined(LLMK_W8A8_VNNI)

// R rows x C panels: int32 accumulators in registers over the whole k loop,
// then the fused dequantizing epilogue. One row (decode) takes its C panels
// one after another, each a single weight stream: on a 2-core Zen 4 that
// decoded llama-110m (every layer in int8) at a median 93% of the read
// bandwidth against 86.5% with four interleaved streams (six alternating
// pairs of runs).
template <int R, int C>
void tile_w8a8(const uint8_t* xq, int64_t ldx, const float* x_scale, int64_t num_k4, const int8_t* panels,
               int64_t panel_stride, const float* w_scale, const int32_t* row_sum, int64_t num_cols, float* y,
               int64_t ldy) {
  if constexpr (R == 1 && C > 1) {
    for (int c = 0; c < C && c * kPanels16Width < num_cols; ++c)
      tile_w8a8<1, 1>(xq, ldx, x_scale, num_k4, panels + c * panel_stride, panel_stride, w_scale + c * kPanels16Width,
                      row_sum + c * kPanels16Width, num_cols - c * kPanels16Width, y + c * kPanels16Width, ldy);
    return;
  }
  __m512i acc[R][C];
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
  for (int64_t k4 = 0; k4 < num_k4; ++k4) {
    __m512i b[C];
    LLMK_UNROLL for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_si512(panels + c * panel_stride + k4 * kPanelBytes);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      int32_t quad;
      std::memcpy(&quad, xq + r * ldx + 4 * k4, 4);
      const __m512i a = _mm512_set1_epi32(quad);
      LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], a, b[c]);
    }
  }
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = num_cols - c * kPanels16Width;
    if (cols <= 0) break;
    const __m512 ws = _mm512_loadu_ps(w_scale + c * kPanels16Width);
    const __m512i shift = _mm512_slli_epi32(_mm512_loadu_si512(row_sum + c * kPanels16Width), 7);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][c], shift));
      const __m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(x_scale[r]));
      _mm512_mask_storeu_ps(y + r * ldy + c * kPanels16Width, tail_mask(cols), _mm512_mul_ps(v, s));
    }
  }
}

#elif defined(LLMK_W8A8_AVX2)

// AVX2 has no unsigned-by-signed byte dot product into int32 (vpdpbusd),
// and vpmaddubsw's int16 pair sums saturate for u8 = q_x + 128 (255 * 127 * 2
// > 32767). It is exact on signed activations q_x = u8 - 128 instead:
// vpmaddubsw(|q_w|, sign(q_x, q_w)) sums pairs of q_x q_w with both factors in
// [-127, 127], so each pair is at most 2 * 127 * 127 = 32258 in magnitude and
// never saturates; vpmaddwd with ones then sums the pairs of each channel's
// 4 k into int32. The accumulator is thus sum_k q_x q_w itself, the same
// integer as the unsigned form minus 128 row_sum, so the output is
// bit-identical to the other paths'. (vpsign zeroes a product where
// q_w = 0, and padding has q_x = 0.)
//
// Each panel's 64 bytes are two 32-byte halves of 8 channels x 4 k: two
// int32 accumulators per row and panel. Rows x panels per pass keep at most
// 8 accumulators in registers (4 panels for one row, 2 for two, then 1).
template <int R, int C>
void pass_w8a8(const uint8_t* xq, int64_t ldx, const float* x_scale, int64_t num_k4, const int8_t* panels,
               int64_t panel_stride, const float* w_scale, int64_t num_cols, float* y, int64_t ldy) {
  __m256i acc[R][C][2];
  LLMK_UNROLL for (int r = 0; r < R; ++r)
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t k4 = 0; k4 < num_k4; ++k4) {
    __m256i a[R];
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      int32_t quad;
      std::memcpy(&quad, xq + r * ldx + 4 * k4, 4);
      a[r] = _mm256_xor_si256(_mm256_set1_epi32(quad), bias);  // u8 - 128 as int8
    }
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h) {
        const __m256i w =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panels + c * panel_stride + k4 * kPanelBytes + 32 * h));
        const __m256i w_abs = _mm256_abs_epi8(w);
        LLMK_UNROLL for (int r = 0; r < R; ++r) {
          const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a[r], w));
          acc[r][c][h] = _mm256_add_epi32(acc[r][c][h], _mm256_madd_epi16(pairs, ones));
        }
      }
  }
  LLMK_UNROLL for (int c = 0; c < C; ++c)
    for (int h = 0; h < 2; ++h) {
      const int64_t cols = num_cols - c * kPanels16Width - 8 * h;
      if (cols <= 0) break;
      const __m256 ws = _mm256_loadu_ps(w_scale + c * kPanels16Width + 8 * h);
      LLMK_UNROLL for (int r = 0; r < R; ++r) {
        const __m256 v = _mm256_cvtepi32_ps(acc[r][c][h]);
        const __m256 s = _mm256_mul_ps(ws, _mm256_set1_ps(x_scale[r]));
        store8(y + r * ldy + c * kPanels16Width + 8 * h, _mm256_mul_ps(v, s), cols);
      }
    }
}

template <int R, int C>
void tile_w8a8(const uint8_t* xq, int64_t ldx, const float* x_scale, int64_t num_k4, const int8_t* panels,
               int64_t panel_stride, const float* w_scale, const int32_t*, int64_t num_cols, float* y, int64_t ldy) {
  constexpr int kStep = R == 1 ? 4 : R == 2 ? 2 : 1;
  for (int c0 = 0; c0 < C; c0 += kStep) {
    const int64_t cols = num_cols - c0 * kPanels16Width;
    if (cols <= 0) break;
    const int8_t* p = panels + c0 * panel_stride;
    float* yc = y + c0 * kPanels16Width;
    const float* ws = w_scale + c0 * kPanels16Width;
    switch (std::min(kStep, C - c0)) {
      case 4: pass_w8a8<R, 4>(xq, ldx, x_scale, num_k4, p, panel_stride, ws, cols, yc, ldy); break;
      case 3: pass_w8a8<R, 3>(xq, ldx, x_scale, num_k4, p, panel_stride, ws, cols, yc, ldy); break;
      case 2: pass_w8a8<R, 2>(xq, ldx, x_scale, num_k4, p, panel_stride, ws, cols, yc, ldy); break;
      default: pass_w8a8<R, 1>(xq, ldx, x_scale, num_k4, p, panel_stride, ws, cols, yc, ldy); break;
    }
  }
}

#else  // portable: the same tiles as arrays, 16 channels x 4 k per step

template <int R, int C>
void tile_w8a8(const uint8_t* xq, int64_t ldx, const float* x_scale, int64_t num_k4, const int8_t* panels,
               int64_t panel_stride, const float* w_scale, const int32_t* row_sum, int64_t num_cols, float* y,
               int64_t ldy) {
  int32_t acc[R][C][kPanels16Width] = {};
  for (int64_t k4 = 0; k4 < num_k4; ++k4)
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const int8_t* b = panels + c * panel_stride + k4 * kPanelBytes;  // [16 channels][4 k]
      LLMK_UNROLL for (int r = 0; r < R; ++r) {
        const uint8_t* a = xq + r * ldx + 4 * k4;
        for (int j = 0; j < kPanels16Width; ++j)
          acc[r][c][j] += a[0] * b[4 * j] + a[1] * b[4 * j + 1] + a[2] * b[4 * j + 2] + a[3] * b[4 * j + 3];
      }
    }
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = std::min<int64_t>(num_cols - c * kPanels16Width, kPanels16Width);
    if (cols <= 0) break;
    LLMK_UNROLL for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t n = c * kPanels16Width + j;
        y[r * ldy + n] = static_cast<float>(acc[r][c][j] - (row_sum[n] << 7)) * (w_scale[n] * x_scale[r]);
      }
  }
}

#endif

using TileFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, const int8_t*, int64_t, const float*,
                        const int32_t*, int64_t, float*, int64_t);

template <int R>
constexpr TileFn tile_for(int c) {
  return c == 1 ? &tile_w8a8<R, 1> : c == 2 ? &tile_w8a8<R, 2> : c == 3 ? &tile_w8a8<R, 3> : &tile_w8a8<R, 4>;
}

TileFn tile_fn(int rows, int panels) {
  static const TileFn table[kMaxRows][kMaxPanels] = {
      {tile_for<1>(1), tile_for<1>(2), tile_for<1>(3), tile_for<1>(4)},
      {tile_for<2>(1), tile_for<2>(2), tile_for<2>(3), tile_for<2>(4)},
      {tile_for<3>(1), tile_for<3>(2), tile_for<3>(3), tile_for<3>(4)},
      {tile_for<4>(1), tile_for<4>(2), tile_for<4>(3), tile_for<4>(4)}};
  return table[rows - 1][panels - 1];
}

#if defined(LLMK_W8A8_VNNI)

inline float hmax(__m512 v) {
  const __m256 m = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

void quantize_row_u8(const float* x, int64_t in_features, int64_t k_pad, uint8_t* xq, float* x_scale) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= in_features; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  if (k < in_features)
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask(in_features - k), x + k)));
  const float amax = hmax(vmax);
  *x_scale = amax / 127.0f;
  const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), bias = _mm512_set1_epi32(128);
  for (k = 0; k < in_features; k += 16) {
    const __mmask16 m = tail_mask(in_features - k);
    // cvtps rounds to nearest even under the default MXCSR.
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), inv));
    q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), bias);
    _mm512_mask_cvtepi32_storeu_epi8(xq + k, m, q);
  }
  std::memset(xq + in_features, 128, static_cast<size_t>(k_pad - in_features));
}

#elif defined(LLMK_W8A8_AVX2)

void quantize_row_u8(const float* x, int64_t in_features, int64_t k_pad, uint8_t* xq, float* x_scale) {
  const float amax = abs_max(x, in_features);
  *x_scale = amax / 127.0f;
  const float inv_s = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 inv = _mm256_set1_ps(inv_s);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), bias = _mm256_set1_epi32(128);
  int64_t k = 0;
  for (; k + 8 <= in_features; k += 8) {
    // cvtps rounds to nearest even under the default MXCSR.
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), inv));
    q = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(q, lo), hi), bias);
    // 8 values in 0..255: pack to u16 then u8 (no saturation), low 8 bytes.
    const __m128i q16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(xq + k), _mm_packus_epi16(q16, q16));
  }
  for (; k < in_features; ++k)
    xq[k] = static_cast<uint8_t>(std::clamp(static_cast<int32_t>(std::nearbyint(x[k] * inv_s)), -127, 127) + 128);
  std::memset(xq + in_features, 128, static_cast<size_t>(k_pad - in_features));
}

#else

void quantize_row_u8(const float* x, int64_t in_features, int64_t k_pad, uint8_t* xq, float* x_scale) {
  const float amax = abs_max(x, in_features);
  *x_scale = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t k = 0; k < in_features; ++k)  // nearest even, as vcvtps2dq under the default MXCSR
    xq[k] = static_cast<uint8_t>(std::clamp(static_cast<int32_t>(std::nearbyint(x[k] * inv)), -127, 127) + 128);
  std::memset(xq + in_features, 128, static_cast<size_t>(k_pad - in_features));
}

#endif

}  // namespace

void pack_w8a8(const float* w, int64_t out_features, int64_t in_features, int8_t* packed, float* scale,
               int32_t* row_sum) {
  const int64_t k_pad = w8a8_k_pad(in_features);
  const int64_t padded_out = num_panels16(out_features) * kPanels16Width;
  std::memset(packed, 0, w8a8_size(out_features, in_features));
#pragma omp parallel for schedule(static)  // rows are independent: pack them in parallel at load
  for (int64_t n = 0; n < padded_out; ++n) {
    scale[n] = 0.0f;
    row_sum[n] = 0;
    if (n >= out_features) continue;
    const float* row = w + n * in_features;
    double amax = 0.0;
    for (int64_t k = 0; k < in_features; ++k) amax = std::max(amax, std::fabs(static_cast<double>(row[k])));
    if (amax == 0.0) continue;
    scale[n] = static_cast<float>(amax / 127.0);
    const double inv = 127.0 / amax;
    int32_t sum = 0;
    for (int64_t k = 0; k < in_features; ++k) {
      const auto q = static_cast<int32_t>(std::clamp(std::nearbyint(row[k] * inv), -127.0, 127.0));
      packed[((n / kPanels16Width) * (k_pad / 4) + k / 4) * 64 + (n % kPanels16Width) * 4 + k % 4] =
          static_cast<int8_t>(q);
      sum += q;
    }
    row_sum[n] = sum;
  }
}

void quantize_rows_u8(const float* x, int64_t num_rows, int64_t in_features, uint8_t* xq, float* x_scale) {
  const int64_t k_pad = w8a8_k_pad(in_features);
  for (int64_t r = 0; r < num_rows; ++r)
    quantize_row_u8(x + r * in_features, in_features, k_pad, xq + r * k_pad, x_scale + r);
}

size_t w8a8_scratch_size(int64_t max_rows, int64_t in_features) {
  const size_t act = static_cast<size_t>(max_rows * w8a8_k_pad(in_features));
  return (act + 63) / 64 * 64 + static_cast<size_t>(max_rows) * sizeof(float);
}

void linear_w8a8(const float* x, int64_t num_rows, int64_t in_features, const int8_t* packed, const float* scale,
                 const int32_t* row_sum, int64_t out_features, float* y, void* scratch, int num_threads) {
  const int64_t k_pad = w8a8_k_pad(in_features);
  auto* xq = static_cast<uint8_t*>(scratch);  // [num_rows, k_pad]
  auto* x_scale = reinterpret_cast<float*>(xq + (static_cast<size_t>(num_rows * k_pad) + 63) / 64 * 64);
  const int64_t panel_stride = k_pad * kPanels16Width;
  const int64_t num_tiles = (num_panels16(out_features) + kMaxPanels - 1) / kMaxPanels;
  // The rows are quantized first (the tiles' barrier), then the tiles are
  // shared out across the team (kernels/cpu/work_shares.hpp).
  WorkShares tiles(num_tiles, num_threads);
#pragma omp parallel num_threads(num_threads) if (num_threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < num_rows; ++r)
      quantize_row_u8(x + r * in_features, in_features, k_pad, xq + r * k_pad, x_scale + r);
    tiles.take(omp_get_thread_num(), [&](int64_t t, int) {
      const int64_t p0 = t * kMaxPanels;
      const int64_t n0 = p0 * kPanels16Width;
      const int c = static_cast<int>(std::min<int64_t>(kMaxPanels, num_panels16(out_features) - p0));
      const int64_t cols = std::min<int64_t>(out_features - n0, c * kPanels16Width);
      for (int64_t r0 = 0; r0 < num_rows; r0 += kMaxRows) {
        const int rr = static_cast<int>(std::min<int64_t>(kMaxRows, num_rows - r0));
        tile_fn(rr, c)(xq + r0 * k_pad, k_pad, x_scale + r0, k_pad / 4, packed + p0 * panel_stride, panel_stride,
                       scale + n0, row_sum + n0, cols, y + r0 * out_features + n0, out_features);
      }
    });
  }
}

}  // namespace llmk::kernels::cpu
