// GGUF-native linear (AVX-512 VNNI, AVX2 or portable): y = x W^T where W is
// ggml's quantized blocks as a GGUF file stores them, never dequantized to
// floats. The weights' integers meet int8 activations in integer dot
// products; the blocks' scales (and mins) are applied per sub-block.
//
// Weight: out_features rows, each in_features / block_elems blocks of the
// type's layout (core/gguf_blocks.hpp describes every layout). gguf_pack
// makes the kernel's own copy once at load: the same integers and scales,
// regrouped (e.g. several rows' blocks interleaved) for the kernel to stream;
// it may equally be a plain copy.
//
// Activations are rounded to int8 at run time in blocks of the weight's
// block size (Q8_0 for the 32-value types, one scale per 256 values with
// 16-value partial sums for the K types), as llama.cpp rounds them, so the
// two engines' results on the same file differ only by summation order.
//
// Packed layout (gguf_pack): row after row, each a sequence of units.
//   Q4_K, Q5_K, Q6_K: the file's blocks unchanged (a unit is one block).
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: a unit is a pair of blocks (64 values; an
//   odd last block is paired with an all-zero one): f16 d0 d1, then for Q4_1
//   and Q5_1 f16 m0 m1; then Q8_0: 64 bytes q + 128 (unsigned); Q5_0, Q5_1:
//   u64 fifth bits (bit i: value i of the 64) followed by, as Q4_0 and Q4_1:
//   32 bytes whose low nibble is block 0's value i, high nibble block 1's.
//   Unit bytes: Q4_0 36, Q4_1 40, Q5_0 44, Q5_1 48, Q8_0 68 (two blocks'
//   worth), so gguf_packed_size equals the file's size for even block counts.
//
// Activation rounding, per row: K types, per 256 values (llama.cpp's Q8_K):
// m = the value of largest magnitude (the first if tied), iscale = -127 / m,
// q = min(127, round-half-even(iscale * x)), d = 1 / iscale, plus the sums of
// q per 16 values. 32-value types, per 32 values (llama.cpp's Q8_0 / Q8_1 on
// x86): d = amax / 127, q = round-half-even(x * (127 / amax)), d kept as f16;
// for Q4_1 / Q5_1 also f16(d * sum q), which the block's min multiplies.
//
// One of the linear family; its naming: kernels/cpu/linear.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmk::kernels::cpu {

// The block types served, by their ggml type ids.
enum class GgufQuant : uint32_t {
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
};

// True when this build has a kernel for the ggml type id (false for any
// other id).
bool gguf_quant_supported(uint32_t ggml_type) noexcept;
// Values per block (32 or 256) and bytes per block of a served type.
int64_t gguf_block_elems(GgufQuant t) noexcept;
size_t gguf_block_bytes(GgufQuant t) noexcept;

// Bytes of the packed weight; in_features must be a whole number of blocks.
size_t gguf_packed_size(GgufQuant t, int64_t out_features, int64_t in_features);
// blocks: [out_features][in_features / block_elems] blocks, any alignment.
// packed: gguf_packed_size bytes, 64-byte aligned.
void gguf_pack(GgufQuant t, const void* blocks, int64_t out_features, int64_t in_features, void* packed,
               int num_threads);

// Bytes of scratch linear_gguf needs for up to max_rows rows (the rounded
// activations and their scales).
size_t gguf_scratch_size(GgufQuant t, int64_t max_rows, int64_t in_features);

// y: [num_rows, out_features] = x: [num_rows, in_features] times the packed
// weight. scratch: gguf_scratch_size(t, num_rows, in_features) bytes, 64-byte
// aligned.
void linear_gguf(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, const void* packed,
                 int64_t out_features, float* y, void* scratch, int num_threads);

}  // namespace llmk::kernels::cpu
