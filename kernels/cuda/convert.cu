// Array conversions (contract in convert.hpp).
#include "cuda_compat.hpp"
#include "convert.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

// src, dst: [n].
template <class From, class To>
__global__ void __launch_bounds__(kConvertThreads, 1) convert_kernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = device::from_float<To>(device::to_float(src[i]));
}

template <class From, class To>
cudaError_t launch_convert(const From* src, To* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t wanted = (n + kConvertThreads - 1) / kConvertThreads;
  const auto num_blocks = static_cast<unsigned>(wanted < kConvertMaxBlocks ? wanted : kConvertMaxBlocks);
  LLMK_LAUNCH(num_blocks, kConvertThreads, 0, stream, convert_kernel<From, To>)(src, dst, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t convert_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
  return launch_convert(src, dst, n, stream);
}
cudaError_t convert_bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream) {
  return launch_convert(src, dst, n, stream);
}
cudaError_t convert_f32_to_f16(const float* src, __half* dst, int64_t n, cudaStream_t stream) {
  return launch_convert(src, dst, n, stream);
}
cudaError_t convert_f16_to_f32(const __half* src, float* dst, int64_t n, cudaStream_t stream) {
  return launch_convert(src, dst, n, stream);
}

}  // namespace llmk::cuda
