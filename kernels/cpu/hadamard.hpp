#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// In place, x[i*block .. (i+1)*block) <- H x[...] for every block of x, where
// H is the orthonormal Walsh-Hadamard matrix of order `block` (a power of
// two; entries +-1/sqrt(block)). H is symmetric and H H = I, so applying it
// twice restores x, and (H q) . (H k) = q . k for any two vectors: the cache
// can hold rotated keys as long as queries are rotated alike. A rotation
// spreads a few large channels over the whole block, which narrows the range
// that one quantization scale must cover. n: a multiple of block.
void hadamard_blocks(float* x, int64_t n, int64_t block);

// The largest power of two dividing n (n > 0).
inline int64_t largest_pow2_divisor(int64_t n) { return n & -n; }

}  // namespace llmk::kernels::cpu
