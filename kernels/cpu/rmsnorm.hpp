#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]
// x, out: [num_rows, dim] (may alias); weight: [dim].
void rmsnorm(const float* x, const float* weight, float* out, int64_t num_rows, int64_t dim, float eps);

// Fused residual add + RMSNorm: residual[r, :] += x[r, :]; out[r, :] = rmsnorm(residual[r, :]).
void add_rmsnorm(float* residual, const float* x, const float* weight, float* out, int64_t num_rows,
                 int64_t dim, float eps);

}  // namespace llmk::kernels::cpu
