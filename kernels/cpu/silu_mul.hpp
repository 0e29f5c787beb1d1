#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// SwiGLU activation: out[r, i] = silu(gate_up[r, i]) * gate_up[r, dim + i],
// silu(g) = g / (1 + exp(-g)).
// gate_up: [num_rows, 2 * dim] (gate half first, then up); out: [num_rows, dim].
void silu_mul(const float* gate_up, float* out, int64_t num_rows, int64_t dim);

}  // namespace llmk::kernels::cpu
