// Weight-only int4 linear on the GPU, in the CPU engine's scheme
// (kernels/cpu/linear_w4.hpp): groups of group_size inputs of one output
// channel share an f32 scale and a u8 zero point, w ~= (q - zero) * scale.
//
// Layout (device): packed uint32 [out_features, k_words] with k_words =
// ceil(in_features / 8); nibble j (bits 4j..4j+3) of word o holds q[8 o + j]
// (zero past in_features). scale f32 and zero u8 [out_features, num_groups].
// group_size is a multiple of 8 or at least in_features, so a word never
// straddles two groups.
//
// - w4_gemv: y [num_rows, out] = x [num_rows, in] W^T for num_rows <=
//   kW4GemvMaxRows (decode): a warp per output channel reads its packed row
//   once, dequantizes in registers and reduces by shuffles; 8 warps a block.
// - w4_dequantize_bf16: channels [c0, c0 + num_channels) of W as bf16
//   [num_channels, in_features] (prefill: the caller multiplies the result
//   with cuBLASLt, a slice of channels at a time).
// Neither allocates nor synchronizes; all pointers are device pointers.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace llmk::cuda {

constexpr int64_t kW4GemvMaxRows = 8;

struct W4DeviceShape {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t group_size = 0;
  __host__ __device__ int64_t k_words() const { return (in_features + 7) / 8; }
  __host__ __device__ int64_t num_groups() const { return (in_features + group_size - 1) / group_size; }
};

// x: [num_rows, in_features] f32, y: [num_rows, out_features] f32, num_rows <= kW4GemvMaxRows.
cudaError_t w4_gemv(const float* x, int64_t num_rows, const W4DeviceShape& shape, const uint32_t* packed,
                    const float* scale, const uint8_t* zero, float* y, cudaStream_t stream);

// w: [num_channels, in_features] bf16, rounded to nearest even from (q - zero) * scale.
cudaError_t w4_dequantize_bf16(const W4DeviceShape& shape, const uint32_t* packed, const float* scale,
                               const uint8_t* zero, int64_t c0, int64_t num_channels, __nv_bfloat16* w,
                               cudaStream_t stream);

}  // namespace llmk::cuda
