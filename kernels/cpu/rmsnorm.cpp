#include "kernels/cpu/rmsnorm.hpp"

#include <cmath>

namespace llmk::kernels::cpu {

namespace {

inline void rmsnorm_row(const float* x, const float* weight, float* out, int64_t dim, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* out, int64_t num_rows, int64_t dim, float eps) {
#pragma omp parallel for if (num_rows > 8)
  for (int64_t r = 0; r < num_rows; ++r) rmsnorm_row(x + r * dim, weight, out + r * dim, dim, eps);
}

void add_rmsnorm(float* residual, const float* x, const float* weight, float* out, int64_t num_rows,
                 int64_t dim, float eps) {
#pragma omp parallel for if (num_rows > 8)
  for (int64_t r = 0; r < num_rows; ++r) {
    float* res = residual + r * dim;
    const float* xr = x + r * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) res[i] += xr[i];
    rmsnorm_row(res, weight, out + r * dim, dim, eps);
  }
}

}  // namespace llmk::kernels::cpu
