// linear_bf16_pairs: y = x W^T over BF16 weights in k-pair panels, the
// operand layout of the AVX-512 BF16 dot-product units, serving both an exact
// product (decode: weights widened in registers) and a BF16 one (batched
// steps: twice the multiply rate). The family and its naming:
// kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear.hpp"

namespace llmk::kernels::cpu {

// Panel p holds outputs [64p, 64p + 64) as [ceil(in_features / 2)][64][2]:
// output c's weights for k steps 2i and 2i + 1 side by side, so one 32-bit
// lane holds what one dot-product lane multiplies (zero past either edge).
// Elements (BF16 bits) of the packed form of a [out_features, in_features] weight.
size_t bf16_pairs_size(int64_t out_features, int64_t in_features);

// w: [out_features, in_features] BF16 bits; packed: [bf16_pairs_size(...)].
void pack_bf16_pairs(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed);

// BF16 elements of the activation scratch for num_rows rows: each row
// rounded to BF16 and zero-padded to an even length.
size_t bf16_pairs_scratch_size(int64_t num_rows, int64_t in_features);

// True when this build multiplies on the BF16 dot-product units (AVX512-BF16).
bool have_bf16_dot();

// y[m, n] = sum_k x[m, k] * w[n, k] over pair-packed BF16 weights.
// x: [num_rows, in_features] f32; y: [num_rows, out_features] f32 (overwritten).
// round_activations false (or no dot-product units): exact, the weights
// widened to F32 in registers, F32 FMA; x_bf16 is not touched. true: x
// rounded to BF16 (nearest even) into x_bf16
// ([bf16_pairs_scratch_size(num_rows, in_features)]), each pair of products
// summed in F32 on the dot-product units: what a BF16 model computes.
// Threads split the panels.
void linear_bf16_pairs(const float* x, int64_t num_rows, int64_t in_features, const uint16_t* packed,
                       bool round_activations, int64_t out_features, float* y, uint16_t* x_bf16, int num_threads);

}  // namespace llmk::kernels::cpu
