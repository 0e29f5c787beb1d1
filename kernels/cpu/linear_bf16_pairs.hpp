// BF16 weights in k-pair panels, the operand layout of the AVX-512 BF16
// dot-product units, serving both an exact product (decode: weights widened
// in registers) and a BF16 one (batched steps: twice the multiply rate).
#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// Panel p holds outputs [64p, 64p + 64) as [ceil(in_features / 2)][64][2]:
// output c's weights for k steps 2i and 2i + 1 side by side, so one 32-bit
// lane holds what one dot-product lane multiplies (zero past either edge).
int64_t packed_pairs_size(int64_t out_features, int64_t in_features);

// w: [out_features, in_features] BF16 bits; packed: [packed_pairs_size(...)].
void pack_pairs(const uint16_t* w, uint16_t* packed, int64_t out_features, int64_t in_features);

// Elements per row of BF16 activation scratch: in_features rounded up to even.
int64_t bf16_row_stride(int64_t in_features);

// True when this build multiplies on the BF16 dot-product units (AVX512-BF16).
bool have_bf16_dot();

// y[m, n] = sum_k x[m, k] * w[n, k] over pair-packed BF16 weights.
// x: [num_rows, in_features] f32; y: [num_rows, out_features] f32 (overwritten).
// round_activations false (or no dot-product units): exact, the weights
// widened to F32 in registers, F32 FMA. true: x rounded to BF16 (nearest
// even) into x_bf16 ([num_rows * bf16_row_stride(in_features)]), each pair
// of products summed in F32 on the dot-product units: what a BF16 model
// computes. Threads split the panels.
void matmul_pairs(const float* x, const uint16_t* packed, float* y, int64_t num_rows, int64_t in_features,
                  int64_t out_features, int num_threads, bool round_activations, uint16_t* x_bf16);

}  // namespace llmk::kernels::cpu
