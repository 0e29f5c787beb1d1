#include "kernels/cpu/silu_mul.hpp"

#include <cmath>

#include "kernels/cpu/vec_math.hpp"

namespace llmk::kernels::cpu {

namespace {

void silu_mul_row(const float* gate, const float* up, float* out, int64_t dim) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= dim; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= dim; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < dim; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace

void silu_mul(const float* gate_up, float* out, int64_t num_rows, int64_t dim) {
#pragma omp parallel for if (num_rows * dim > (1 << 16))
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = gate_up + r * 2 * dim;
    silu_mul_row(row, row + dim, out + r * dim, dim);
  }
}

}  // namespace llmk::kernels::cpu
