// Lookup-table 4-bit GEMV and dequantization (contract in gemm_lut4.hpp).
#include "cuda_compat.hpp"
#include "gemm_lut4.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kDequantThreads = 256;
constexpr int64_t kDequantMaxBlocks = 4096;

// The codebooks (the CPU's kernels/cpu/linear_lut4_impl.hpp): NF4, then
// IQ4_NL's integer levels.
__device__ __forceinline__ float codebook_value(int book, int i) {
  constexpr float kValues[2][16] = {
      {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
       -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
       0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
       1.0f},
      {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}};
  return kValues[book][i];
}

// Scales of unit bytes b: the first and second 32 inputs'.
__device__ __forceinline__ void unit_scales(const uint8_t* b, bool f16, float& s0, float& s1) {
  if (f16) {
    __half_raw h0, h1;
    h0.x = static_cast<unsigned short>(b[0] | b[1] << 8);
    h1.x = static_cast<unsigned short>(b[2] | b[3] << 8);
    s0 = __half2float(__half(h0));
    s1 = __half2float(__half(h1));
  } else {
    s0 = s1 = *reinterpret_cast<const float*>(b);  // units start on 4 bytes
  }
}

// A warp per output channel, a unit per lane at a time. x: [num_rows,
// in_features], packed: [out, num_units] units, y: [num_rows, out].
__global__ void __launch_bounds__(kGemvWarps * 32, 1)
    lut4_gemv_kernel(const float* __restrict__ x, int num_rows, Lut4DeviceShape s, const uint8_t* __restrict__ packed,
                     float* __restrict__ y) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = codebook_value(static_cast<int>(s.codebook), threadIdx.x);
  __syncthreads();
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (c >= s.out_features) return;  // the whole warp leaves together (after the barrier)
  const int64_t units = s.num_units();
  float acc[kLut4GemvMaxRows] = {};
  for (int64_t u = lane; u < units; u += warpSize) {
    const uint8_t* b = packed + (c * units + u) * kLut4UnitBytes;
    float s0, s1;
    unit_scales(b, s.f16_scales, s0, s1);
    const auto* words = reinterpret_cast<const uint32_t*>(b + 4);
    for (int wi = 0; wi < 8; ++wi) {
      const uint32_t word = words[wi];
      for (int j = 0; j < 4; ++j) {
        const uint32_t byte = (word >> (8 * j)) & 0xffu;
        const int64_t k0 = 64 * u + 4 * wi + j, k1 = k0 + 32;
        const float w0 = s0 * table[byte & 0xfu], w1 = s1 * table[byte >> 4];
        for (int r = 0; r < kLut4GemvMaxRows; ++r) {
          if (r >= num_rows) break;
          if (k0 < s.in_features) acc[r] += w0 * x[r * s.in_features + k0];
          if (k1 < s.in_features) acc[r] += w1 * x[r * s.in_features + k1];
        }
      }
    }
  }
  for (int r = 0; r < kLut4GemvMaxRows; ++r) {
    if (r >= num_rows) break;
    const float total = device::warp_sum(acc[r]);
    if (lane == 0) y[r * s.out_features + c] = total;
  }
}

// w: [num_channels, in_features] bf16 from channels c0.. of the packed weight.
__global__ void __launch_bounds__(kDequantThreads, 1)
    lut4_dequantize_kernel(Lut4DeviceShape s, const uint8_t* __restrict__ packed, int64_t c0, int64_t num_channels,
                           __nv_bfloat16* __restrict__ w) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = codebook_value(static_cast<int>(s.codebook), threadIdx.x);
  __syncthreads();
  const int64_t n = num_channels * s.in_features, units = s.num_units();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = c0 + i / s.in_features, k = i % s.in_features;
    const uint8_t* b = packed + (c * units + k / 64) * kLut4UnitBytes;
    float s0, s1;
    unit_scales(b, s.f16_scales, s0, s1);
    const bool second = k % 64 >= 32;
    const uint32_t q = (b[4 + k % 32] >> (second ? 4 : 0)) & 0xfu;
    w[i] = device::from_float<__nv_bfloat16>((second ? s1 : s0) * table[q]);
  }
}

}  // namespace

cudaError_t lut4_gemv(const float* x, int64_t num_rows, const Lut4DeviceShape& shape, const uint8_t* packed, float* y,
                      cudaStream_t stream) {
  if (num_rows <= 0 || shape.out_features <= 0) return cudaSuccess;
  if (num_rows > kLut4GemvMaxRows) return cudaErrorInvalidValue;
  const auto num_blocks = static_cast<unsigned>((shape.out_features + kGemvWarps - 1) / kGemvWarps);
  LLMK_LAUNCH(num_blocks, kGemvWarps * 32, 0, stream, lut4_gemv_kernel)(x, static_cast<int>(num_rows), shape, packed,
                                                                         y);
  return cudaGetLastError();
}

cudaError_t lut4_dequantize_bf16(const Lut4DeviceShape& shape, const uint8_t* packed, int64_t c0,
                                 int64_t num_channels, __nv_bfloat16* w, cudaStream_t stream) {
  if (num_channels <= 0) return cudaSuccess;
  if (c0 < 0 || c0 + num_channels > shape.out_features) return cudaErrorInvalidValue;
  const int64_t wanted = (num_channels * shape.in_features + kDequantThreads - 1) / kDequantThreads;
  const auto num_blocks = static_cast<unsigned>(wanted < kDequantMaxBlocks ? wanted : kDequantMaxBlocks);
  LLMK_LAUNCH(num_blocks, kDequantThreads, 0, stream, lut4_dequantize_kernel)(shape, packed, c0, num_channels, w);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
