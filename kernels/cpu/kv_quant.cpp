#include "kernels/cpu/kv_quant.hpp"

#if defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_* placeholders inside <immintrin.h>.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#elif defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

namespace llmk::kernels::cpu {

namespace {

void quantize_row(const float* src, int8_t* dst, float* scales, int64_t dim, int64_t group_size) {
  for (int64_t g0 = 0; g0 < dim; g0 += group_size) {
    float amax = 0.0f;
#pragma omp simd reduction(max : amax)
    for (int64_t i = 0; i < group_size; ++i) amax = std::max(amax, std::fabs(src[g0 + i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[g0 / group_size] = amax / 127.0f;
#pragma omp simd
    for (int64_t i = 0; i < group_size; ++i)
      dst[g0 + i] = static_cast<int8_t>(std::clamp(std::nearbyint(src[g0 + i] * inv), -127.0f, 127.0f));
  }
}

}  // namespace

void kv_quantize(const float* src, int8_t* dst, float* scales, int64_t num_rows, int64_t dim, int64_t group_size) {
  const int64_t num_groups = dim / group_size;
  for (int64_t r = 0; r < num_rows; ++r)
    quantize_row(src + r * dim, dst + r * dim, scales + r * num_groups, dim, group_size);
}

void kv_quantize_to_slots(const float* src, const int32_t* slots, int64_t num_rows, int64_t dim, int64_t group_size,
                          int8_t* cache, float* cache_scales) {
  const int64_t num_groups = dim / group_size;
  for (int64_t r = 0; r < num_rows; ++r) {
    if (slots[r] < 0) continue;
    const int64_t slot = slots[r];
    quantize_row(src + r * dim, cache + slot * dim, cache_scales + slot * num_groups, dim, group_size);
  }
}

void kv_dequantize_row(const int8_t* src, const float* scales, float* dst, int64_t dim, int64_t group_size) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // Called once per cached row per attention step: no divisions in here.
  auto load16 = [&](int64_t i) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  };
  if (group_size % 16 == 0) {
    for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group_size, ++gi) {
      const __m512 sc = _mm512_set1_ps(scales[gi]);
      for (i = g0; i < g0 + group_size; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(load16(i), sc));
    }
    return;
  }
  if (16 % group_size == 0) {
    // group_size is 1, 2, 4 or 8: lane l takes scale l >> log2(group_size) of the vector's first group.
    const int shift = __builtin_ctzll(static_cast<unsigned long long>(group_size));
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i vidx = _mm512_srlv_epi32(lanes, _mm512_set1_epi32(shift));
    const int64_t per_vec = 16 >> shift;
    const __mmask16 smask = static_cast<__mmask16>((1u << per_vec) - 1u);
    for (int64_t si = 0; i + 16 <= dim; i += 16, si += per_vec) {
      const __m512 sc = _mm512_permutexvar_ps(vidx, _mm512_maskz_loadu_ps(smask, scales + si));
      _mm512_storeu_ps(dst + i, _mm512_mul_ps(load16(i), sc));
    }
  }
#else
#if defined(__AVX2__)
  if (group_size % 8 == 0) {  // 8 values per vector, one scale per group
    for (int64_t g0 = 0, gi = 0; g0 < dim; g0 += group_size, ++gi) {
      const __m256 sc = _mm256_set1_ps(scales[gi]);
      for (int64_t j = g0; j < g0 + group_size; j += 8) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + j));
        _mm256_storeu_ps(dst + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), sc));
      }
    }
    return;
  }
#endif
  for (int64_t g0 = 0; g0 < dim; g0 += group_size, i = g0) {
    const float sc = scales[g0 / group_size];
    for (int64_t j = g0; j < g0 + group_size; ++j) dst[j] = static_cast<float>(src[j]) * sc;
  }
#endif
  for (; i < dim; ++i) dst[i] = static_cast<float>(src[i]) * scales[i / group_size];
}

void kv_dequantize(const int8_t* src, const float* scales, float* dst, int64_t num_rows, int64_t dim,
                   int64_t group_size) {
  const int64_t num_groups = dim / group_size;
  for (int64_t r = 0; r < num_rows; ++r)
    kv_dequantize_row(src + r * dim, scales + r * num_groups, dst + r * dim, dim, group_size);
}

}  // namespace llmk::kernels::cpu
