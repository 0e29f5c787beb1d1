// Device helpers shared by the engine's elementwise and attention kernels:
// element conversions between f32, f16 and bf16, and block-wide reductions.
// Header-only; every function is __device__ inline, so each kernel file gets
// its own copy. Static shared memory is always declared by the kernel and
// passed in (a __shared__ inside an inline helper would be one variable for
// every kernel that calls it).
#pragma once

#include "cuda_compat.hpp"

namespace llmk::cuda::device {

constexpr unsigned kFullWarpMask = 0xffffffffu;
constexpr int kMaxWarpsPerBlock = 32;

// Scalar conversions. f16 and bf16 conversions round to nearest even, as the
// CPU engine's kernels/cpu/convert.hpp does (NaN stays NaN, its payload may differ).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarpMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

// Reductions over the whole block; every thread gets the result.
// blockDim.x a multiple of 32 (at most 1024), every thread of the block calls
// it (it contains barriers). scratch: static shared memory of
// kMaxWarpsPerBlock + 1 floats, free for reuse once the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int num_warps = blockDim.x / warpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < num_warps ? scratch[lane] : 0.0f);
    if (lane == 0) scratch[kMaxWarpsPerBlock] = v;
  }
  __syncthreads();
  const float total = scratch[kMaxWarpsPerBlock];
  __syncthreads();  // the caller may reuse scratch (or call again) right away
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int num_warps = blockDim.x / warpSize;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_max(lane < num_warps ? scratch[lane] : -INFINITY);
    if (lane == 0) scratch[kMaxWarpsPerBlock] = v;
  }
  __syncthreads();
  const float result = scratch[kMaxWarpsPerBlock];
  __syncthreads();
  return result;
}

}  // namespace llmk::cuda::device
