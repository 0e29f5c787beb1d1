// Int4 weight-only GEMV and dequantization (contract in gemm_w4.hpp).
#include "cuda_compat.hpp"
#include "gemm_w4.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kDequantThreads = 256;
constexpr int64_t kDequantMaxBlocks = 4096;

// A warp per output channel: lanes stride over the channel's packed words.
// x: [num_rows, in_features], packed: [out, k_words], scale/zero: [out,
// num_groups], y: [num_rows, out].
__global__ void __launch_bounds__(kGemvWarps * 32, 1) w4_gemv_kernel(const float* __restrict__ x, int num_rows, W4DeviceShape s,
                               const uint32_t* __restrict__ packed, const float* __restrict__ scale,
                               const uint8_t* __restrict__ zero, float* __restrict__ y) {
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (c >= s.out_features) return;  // the whole warp leaves together
  const int64_t k_words = s.k_words(), num_groups = s.num_groups();
  float acc[kW4GemvMaxRows] = {};
  for (int64_t o = lane; o < k_words; o += warpSize) {
    const uint32_t word = packed[c * k_words + o];
    const int64_t g = 8 * o / s.group_size;
    const float sc = scale[c * num_groups + g];
    const float z = static_cast<float>(zero[c * num_groups + g]);
    for (int j = 0; j < 8; ++j) {
      const int64_t k = 8 * o + j;
      if (k >= s.in_features) break;
      const float w = (static_cast<float>((word >> (4 * j)) & 0xfu) - z) * sc;
      for (int r = 0; r < kW4GemvMaxRows; ++r)
        if (r < num_rows) acc[r] += w * x[r * s.in_features + k];
    }
  }
  for (int r = 0; r < kW4GemvMaxRows; ++r) {
    if (r >= num_rows) break;
    const float total = device::warp_sum(acc[r]);
    if (lane == 0) y[r * s.out_features + c] = total;
  }
}

// w: [num_channels, in_features] bf16 from channels c0.. of the packed weight.
__global__ void __launch_bounds__(kDequantThreads, 1) w4_dequantize_kernel(W4DeviceShape s, const uint32_t* __restrict__ packed,
                                     const float* __restrict__ scale, const uint8_t* __restrict__ zero, int64_t c0,
                                     int64_t num_channels, __nv_bfloat16* __restrict__ w) {
  const int64_t n = num_channels * s.in_features, k_words = s.k_words(), num_groups = s.num_groups();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = c0 + i / s.in_features, k = i % s.in_features, g = k / s.group_size;
    const uint32_t q = (packed[c * k_words + k / 8] >> (4 * (k % 8))) & 0xfu;
    const float v = (static_cast<float>(q) - static_cast<float>(zero[c * num_groups + g])) * scale[c * num_groups + g];
    w[i] = device::from_float<__nv_bfloat16>(v);
  }
}

}  // namespace

cudaError_t w4_gemv(const float* x, int64_t num_rows, const W4DeviceShape& shape, const uint32_t* packed,
                    const float* scale, const uint8_t* zero, float* y, cudaStream_t stream) {
  if (num_rows <= 0 || shape.out_features <= 0) return cudaSuccess;
  if (num_rows > kW4GemvMaxRows || shape.group_size <= 0) return cudaErrorInvalidValue;
  const auto num_blocks = static_cast<unsigned>((shape.out_features + kGemvWarps - 1) / kGemvWarps);
  LLMK_LAUNCH(num_blocks, kGemvWarps * 32, 0, stream, w4_gemv_kernel)(x, static_cast<int>(num_rows), shape, packed,
                                                                       scale, zero, y);
  return cudaGetLastError();
}

cudaError_t w4_dequantize_bf16(const W4DeviceShape& shape, const uint32_t* packed, const float* scale,
                               const uint8_t* zero, int64_t c0, int64_t num_channels, __nv_bfloat16* w,
                               cudaStream_t stream) {
  if (num_channels <= 0) return cudaSuccess;
  if (c0 < 0 || c0 + num_channels > shape.out_features || shape.group_size <= 0) return cudaErrorInvalidValue;
  const int64_t wanted = (num_channels * shape.in_features + kDequantThreads - 1) / kDequantThreads;
  const auto num_blocks = static_cast<unsigned>(wanted < kDequantMaxBlocks ? wanted : kDequantMaxBlocks);
  LLMK_LAUNCH(num_blocks, kDequantThreads, 0, stream, w4_dequantize_kernel)(shape, packed, scale, zero, c0,
                                                                            num_channels, w);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
