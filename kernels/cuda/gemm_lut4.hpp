// Lookup-table 4-bit linear on the GPU, in the CPU engine's layout and
// scheme (kernels/cpu/linear_lut4.hpp): w[n, k] = scale * values[q], values
// one of two 16-entry codebooks (NF4, IQ4_NL), q 4-bit, one scale per block.
//
// Layout (device): the CPU's lut4 units as they are, [out_features][num_units]
// units of 36 bytes, unit u covering inputs [64u, 64u + 64): bytes 0-3 the
// scales (f16 pair for blocks of 32, else the block's f32), bytes 4-35 byte
// i: low nibble q[64u + i], high nibble q[64u + 32 + i].
//
// - lut4_gemv: y [num_rows, out] = x [num_rows, in] W^T for num_rows <=
//   kLut4GemvMaxRows (decode): a warp per output channel, a unit per lane at a
//   time; the codebook sits in shared memory, the weights are looked up and
//   scaled in registers, f32 products, warp-shuffle sums; 8 warps a block.
// - lut4_dequantize_bf16: channels [c0, c0 + num_channels) of W as bf16
//   [num_channels, in_features] (prefill: the caller multiplies the result
//   with cuBLASLt, a slice of channels at a time).
// Neither allocates nor synchronizes; all pointers are device pointers.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int64_t kLut4GemvMaxRows = 8;
constexpr int64_t kLut4UnitBytes = 36;

enum class Lut4Codebook : int { nf4 = 0, iq4_nl = 1 };

struct Lut4DeviceShape {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool f16_scales = false;  // blocks of 32
  Lut4Codebook codebook = Lut4Codebook::iq4_nl;
  __host__ __device__ int64_t num_units() const { return (in_features + 63) / 64; }
};

// x: [num_rows, in_features] f32, y: [num_rows, out_features] f32, num_rows <= kLut4GemvMaxRows.
cudaError_t lut4_gemv(const float* x, int64_t num_rows, const Lut4DeviceShape& shape, const uint8_t* packed, float* y,
                      cudaStream_t stream);

// w: [num_channels, in_features] bf16, rounded to nearest even from scale * values[q].
cudaError_t lut4_dequantize_bf16(const Lut4DeviceShape& shape, const uint8_t* packed, int64_t c0,
                                 int64_t num_channels, __nv_bfloat16* w, cudaStream_t stream);

}  // namespace llmk::cuda
