// Activation quantization (contract in quantize_rows.hpp).
#include "cuda_compat.hpp"
#include "quantize_rows.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

constexpr float kInt8Max = 127.0f;
constexpr float kFp8E4M3Max = 448.0f;

// x: [num_rows, in_features] -> amax: [num_rows]; one block per row.
__global__ void __launch_bounds__(kQuantizeThreads, 1) row_absmax_kernel(const float* __restrict__ x, int64_t in_features, float* __restrict__ amax) {
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * in_features;
  float m = 0.0f;
  for (int64_t k = threadIdx.x; k < in_features; k += blockDim.x) m = fmaxf(m, fabsf(row[k]));
  m = device::block_max(m, scratch);
  if (threadIdx.x == 0) amax[blockIdx.x] = m;
}

__device__ __forceinline__ void store_q(int8_t* q, float v) {
  q[0] = static_cast<int8_t>(fminf(fmaxf(rintf(v), -kInt8Max), kInt8Max));
}
__device__ __forceinline__ void store_q(__nv_fp8_e4m3* q, float v) { q[0] = __nv_fp8_e4m3(v); }

// x: [num_rows, in_features] -> q: [num_rows, k_pad], scale: [num_rows];
// tensor_amax: null or [num_rows]. One block per row.
template <class Q>
__global__ void __launch_bounds__(kQuantizeThreads, 1) quantize_rows_kernel(const float* __restrict__ x, int64_t num_rows, int64_t in_features,
                                     int64_t k_pad, const float* __restrict__ tensor_amax, float q_max,
                                     Q* __restrict__ q, float* __restrict__ scale) {
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];
  const int64_t r = blockIdx.x;
  const float* row = x + r * in_features;
  float m = 0.0f;
  if (tensor_amax != nullptr) {
    for (int64_t i = threadIdx.x; i < num_rows; i += blockDim.x) m = fmaxf(m, tensor_amax[i]);
  } else {
    for (int64_t k = threadIdx.x; k < in_features; k += blockDim.x) m = fmaxf(m, fabsf(row[k]));
  }
  m = device::block_max(m, scratch);
  const float inv = m > 0.0f ? q_max / m : 0.0f;
  Q* out = q + r * k_pad;
  for (int64_t k = threadIdx.x; k < k_pad; k += blockDim.x) store_q(out + k, k < in_features ? row[k] * inv : 0.0f);
  if (threadIdx.x == 0) scale[r] = m / q_max;
}

template <class Q>
cudaError_t launch_quantize(const float* x, int64_t num_rows, int64_t in_features, int64_t k_pad,
                            const float* tensor_amax, float q_max, Q* q, float* scale, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  if (k_pad < in_features) return cudaErrorInvalidValue;
  LLMK_LAUNCH(static_cast<unsigned>(num_rows), kQuantizeThreads, 0, stream, quantize_rows_kernel<Q>)(
      x, num_rows, in_features, k_pad, tensor_amax, q_max, q, scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t row_absmax(const float* x, int64_t num_rows, int64_t in_features, float* amax, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  LLMK_LAUNCH(static_cast<unsigned>(num_rows), kQuantizeThreads, 0, stream, row_absmax_kernel)(x, in_features, amax);
  return cudaGetLastError();
}

cudaError_t quantize_rows_i8(const float* x, int64_t num_rows, int64_t in_features, int64_t k_pad,
                             const float* tensor_amax, int8_t* q, float* scale, cudaStream_t stream) {
  return launch_quantize(x, num_rows, in_features, k_pad, tensor_amax, kInt8Max, q, scale, stream);
}

cudaError_t quantize_rows_fp8(const float* x, int64_t num_rows, int64_t in_features, int64_t k_pad,
                              const float* tensor_amax, __nv_fp8_e4m3* q, float* scale, cudaStream_t stream) {
  return launch_quantize(x, num_rows, in_features, k_pad, tensor_amax, kFp8E4M3Max, q, scale, stream);
}

}  // namespace llmk::cuda
