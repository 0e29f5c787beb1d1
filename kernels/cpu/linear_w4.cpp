// linear_w4 (linear_w4.hpp): the f32-activation kernels (one row against
// the panels in registers, many rows through dequantized panels) and the
// dispatch among them, the int8-activation path (linear_w4_a8.cpp) and the
// AMX tiles (linear_w4_tiles.cpp). Packing is in linear_w4_pack.cpp.
#include "kernels/cpu/linear_w4.hpp"

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

#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/linear_w4_a8.hpp"
#include "kernels/cpu/linear_w4_tiles.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace llmk::kernels::cpu {

namespace {

#if defined(__AVX512F__)

// Nibble j of each 32-bit lane as a float: vpermps reads only the low four
// bits of each index, so a table of 0..15 converts without masking.
inline __m512 nibble_ps(__m512i words, int j, __m512 table) {
  return _mm512_permutexvar_ps(j == 0 ? words : _mm512_srli_epi32(words, 4 * j), table);
}

inline __m512 nibble_table() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// One row, C panels: per group, sum raw q * x in registers, then fold in the
// group's scale and zero point. xp: [k_pad] zero-padded, xsum: [num_groups].
template <int C>
void gemv_tile_w4(const float* xp, const float* xsum, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const __m512 table = nibble_table();
  __m512 total[C];
  LLMK_UNROLL for (int c = 0; c < C; ++c) total[c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t o_end = s.group_octet_end(g);
    __m512 acc[C];
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t o = o_begin; o < o_end; ++o) {
      __m512i words[C];
      LLMK_UNROLL for (int c = 0; c < C; ++c)
        words[c] = _mm512_loadu_si512(packed + ((p0 + c) * num_octets + o) * kPanels16Width);
      for (int j = 0; j < 8; ++j) {
        const __m512 xj = _mm512_set1_ps(xp[8 * o + j]);
        LLMK_UNROLL for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(nibble_ps(words[c], j, table), xj, acc[c]);
      }
    }
    const __m512 gsum = _mm512_set1_ps(xsum[g]);
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const int64_t at = ((p0 + c) * num_groups + g) * kPanels16Width;
      const __m512 sc = _mm512_loadu_ps(scale + at);
      const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zero + at))));
      total[c] = _mm512_fmadd_ps(sc, _mm512_fnmadd_ps(z, gsum, acc[c]), total[c]);
    }
  }
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = num_cols - c * kPanels16Width;
    if (cols <= 0) break;
    _mm512_mask_storeu_ps(y + c * kPanels16Width, tail_mask(cols), total[c]);
  }
}

// Dequantizes panel p to f32: out: [in_features][16].
void dequantize_panel(const W4Shape& s, const uint32_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const __m512 table = nibble_table();
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t at = (p * num_groups + g) * kPanels16Width;
    const __m512 sc = _mm512_loadu_ps(scale + at);
    const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zero + at))));
    const int64_t k_end = std::min(s.in_features, (g + 1) * s.group_size);
    for (int64_t k = g * s.group_size; k < k_end; k += 8) {
      const __m512i words = _mm512_loadu_si512(packed + (p * num_octets + k / 8) * kPanels16Width);
      const int j_end = static_cast<int>(std::min<int64_t>(8, k_end - k));
      for (int j = 0; j < j_end; ++j)
        _mm512_storeu_ps(out + (k + j) * kPanels16Width, _mm512_mul_ps(_mm512_sub_ps(nibble_ps(words, j, table), z), sc));
    }
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

// Nibble j of each 32-bit lane as a float (AVX2 has no 16-entry float
// permute, so shift, mask and convert).
inline __m256 nibble_ps8(__m256i words, int j) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(words, 4 * j), _mm256_set1_epi32(15)));
}

inline __m256 load_zero_ps8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// One row, C (1 or 2) panels as 8-channel halves: per group, sum raw q * x
// in registers, then fold in the group's scale and zero point.
template <int C>
void gemv_pass_w4(const float* xp, const float* xsum, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  __m256 total[C][2];
  LLMK_UNROLL for (int c = 0; c < C; ++c) total[c][0] = total[c][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t o_end = s.group_octet_end(g);
    __m256 acc[C][2];
    LLMK_UNROLL for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
    for (int64_t o = o_begin; o < o_end; ++o) {
      __m256i words[C][2];
      LLMK_UNROLL for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h)
          words[c][h] = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(packed + ((p0 + c) * num_octets + o) * kPanels16Width + 8 * h));
      for (int j = 0; j < 8; ++j) {
        const __m256 xj = _mm256_broadcast_ss(xp + 8 * o + j);
        LLMK_UNROLL for (int c = 0; c < C; ++c)
          for (int h = 0; h < 2; ++h) acc[c][h] = _mm256_fmadd_ps(nibble_ps8(words[c][h], j), xj, acc[c][h]);
      }
    }
    const __m256 gsum = _mm256_set1_ps(xsum[g]);
    LLMK_UNROLL for (int c = 0; c < C; ++c)
      for (int h = 0; h < 2; ++h) {
        const int64_t at = ((p0 + c) * num_groups + g) * kPanels16Width + 8 * h;
        const __m256 sc = _mm256_loadu_ps(scale + at);
        total[c][h] = _mm256_fmadd_ps(sc, _mm256_fnmadd_ps(load_zero_ps8(zero + at), gsum, acc[c][h]), total[c][h]);
      }
  }
  LLMK_UNROLL for (int c = 0; c < C; ++c)
    for (int h = 0; h < 2; ++h) {
      const int64_t cols = num_cols - c * kPanels16Width - 8 * h;
      if (cols <= 0) break;
      store8(y + c * kPanels16Width + 8 * h, total[c][h], cols);
    }
}

template <int C>
void gemv_tile_w4(const float* xp, const float* xsum, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  for (int c0 = 0; c0 < C; c0 += 2) {
    const int64_t cols = num_cols - c0 * kPanels16Width;
    if (cols <= 0) break;
    if (C - c0 >= 2) gemv_pass_w4<2>(xp, xsum, s, packed, scale, zero, p0 + c0, cols, y + c0 * kPanels16Width);
    else gemv_pass_w4<1>(xp, xsum, s, packed, scale, zero, p0 + c0, cols, y + c0 * kPanels16Width);
  }
}

// Dequantizes panel p to f32: out: [in_features][16].
void dequantize_panel(const W4Shape& s, const uint32_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  for (int64_t g = 0; g < num_groups; ++g)
    for (int h = 0; h < 2; ++h) {
      const int64_t at = (p * num_groups + g) * kPanels16Width + 8 * h;
      const __m256 sc = _mm256_loadu_ps(scale + at);
      const __m256 z = load_zero_ps8(zero + at);
      const int64_t k_end = std::min(s.in_features, (g + 1) * s.group_size);
      for (int64_t k = g * s.group_size; k < k_end; k += 8) {
        const __m256i words =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + (p * num_octets + k / 8) * kPanels16Width + 8 * h));
        const int j_end = static_cast<int>(std::min<int64_t>(8, k_end - k));
        for (int j = 0; j < j_end; ++j)
          _mm256_storeu_ps(out + (k + j) * kPanels16Width + 8 * h, _mm256_mul_ps(_mm256_sub_ps(nibble_ps8(words, j), z), sc));
      }
    }
}

#else  // portable: the same tiles as arrays, 16 channels per loop

template <int C>
void gemv_tile_w4(const float* xp, const float* xsum, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  float total[C][kPanels16Width] = {};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t o_end = s.group_octet_end(g);
    float acc[C][kPanels16Width] = {};
    for (int64_t o = o_begin; o < o_end; ++o)
      LLMK_UNROLL for (int c = 0; c < C; ++c) {
        const uint32_t* words = packed + ((p0 + c) * num_octets + o) * kPanels16Width;
        for (int j = 0; j < 8; ++j) {
          const float xj = xp[8 * o + j];
          for (int l = 0; l < kPanels16Width; ++l)
            acc[c][l] += static_cast<float>((words[l] >> (4 * j)) & 15u) * xj;
        }
      }
    LLMK_UNROLL for (int c = 0; c < C; ++c) {
      const int64_t at = ((p0 + c) * num_groups + g) * kPanels16Width;
      for (int l = 0; l < kPanels16Width; ++l)
        total[c][l] += scale[at + l] * (acc[c][l] - static_cast<float>(zero[at + l]) * xsum[g]);
    }
  }
  LLMK_UNROLL for (int c = 0; c < C; ++c) {
    const int64_t cols = std::min<int64_t>(num_cols - c * kPanels16Width, kPanels16Width);
    if (cols <= 0) break;
    std::memcpy(y + c * kPanels16Width, total[c], static_cast<size_t>(cols) * sizeof(float));
  }
}

// Dequantizes panel p to f32: out: [in_features][16].
void dequantize_panel(const W4Shape& s, const uint32_t* packed, const float* scale, const uint8_t* zero, int64_t p,
                      float* out) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t at = (p * num_groups + g) * kPanels16Width;
    const int64_t k_end = std::min(s.in_features, (g + 1) * s.group_size);
    for (int64_t k = g * s.group_size; k < k_end; ++k) {
      const uint32_t* words = packed + (p * num_octets + k / 8) * kPanels16Width;
      for (int l = 0; l < kPanels16Width; ++l)
        out[k * kPanels16Width + l] =
            (static_cast<float>((words[l] >> (4 * (k % 8))) & 15u) - static_cast<float>(zero[at + l])) * scale[at + l];
    }
  }
}

#endif

}  // namespace

size_t w4_scratch_size(const W4Shape& s, int num_threads, int64_t max_rows, W4Activations activations) {
  if (activations == W4Activations::int8)  // every row's quads, scales and sums
    return static_cast<size_t>(std::max<int64_t>(1, max_rows) * w4a8_row_floats(s));
  const size_t gemv = static_cast<size_t>(s.k_pad() + s.num_groups());
  const size_t gemm = dequantized_panels16_scratch_size(s.in_features, num_threads);
  return std::max(gemv, gemm);
}

int64_t w4_tiles::row_floats(const W4Shape& s) { return w4a8_row_floats(s); }

void linear_w4(const float* x, int64_t num_rows, const W4Shape& s, const uint32_t* packed, const float* scale,
               const uint8_t* zero, float* y, float* scratch, int num_threads, W4Activations activations,
               W4Matmul matmul) {
  if (num_rows > 1 && activations == W4Activations::int8) {
    const bool tiles = w4_amx_shape(s) && ((matmul == W4Matmul::amx && w4_amx_available()) ||
                                           (matmul == W4Matmul::amx_model && w4_amx_built()));
    if (!tiles) return rows_w4a8(x, num_rows, s, packed, scale, zero, y, scratch, num_threads);
    const int threads = num_threads > 1 && num_rows * s.in_features >= (1 << 14) ? num_threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t m = 0; m < num_rows; ++m) quantize_row_a8(x + m * s.in_features, s, row_a8_at(scratch, s, m));
    return w4_tiles::rows(matmul == W4Matmul::amx_model, s, packed, scale, zero, scratch, w4a8_row_floats(s),
                          num_rows, y, num_threads);
  }
  if (num_rows == 1 && activations == W4Activations::int8) {
    const W4RowA8 r = row_a8_at(scratch, s, 0);
    quantize_row_a8(x, s, r);
    one_row_w4a8(r, s, packed, scale, zero, y, num_threads);
    return;
  }
  if (num_rows == 1) {
    float* xp = scratch;                 // [k_pad]
    float* xsum = scratch + s.k_pad();   // [num_groups]
    std::memcpy(xp, x, static_cast<size_t>(s.in_features) * sizeof(float));
    std::fill(xp + s.in_features, xp + s.k_pad(), 0.0f);
    for (int64_t g = 0; g < s.num_groups(); ++g) {
      float sum = 0.0f;
      const int64_t k1 = std::min(s.in_features, (g + 1) * s.group_size);
      for (int64_t k = g * s.group_size; k < k1; ++k) sum += x[k];
      xsum[g] = sum;
    }
    for_one_row_tiles(s.out_features, num_threads, [&](auto panels, int64_t p0, int64_t num_cols, int64_t n0) {
      gemv_tile_w4<decltype(panels)::value>(xp, xsum, s, packed, scale, zero, p0, num_cols, y + n0);
    });
    return;
  }
  linear_dequantized_panels16(
      x, num_rows, s.in_features,
      [&](int64_t p, float* out) { dequantize_panel(s, packed, scale, zero, p, out); }, s.out_features, y, scratch,
      num_threads);
}

}  // namespace llmk::kernels::cpu
