// Fused residual add + RMSNorm (contract in rmsnorm.hpp).
#include "cuda_compat.hpp"
#include "rmsnorm.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

// hidden, x, out: [num_rows, dim]; weight: [dim]. One block per row. Each
// thread touches the same indices in both passes, so the in-place update
// and an aliased out need no barrier between them.
template <class W>
__global__ void __launch_bounds__(kRmsnormThreads, 1) rmsnorm_kernel(float* hidden, const float* x, const W* __restrict__ weight, float* out, int64_t dim,
                               float eps) {
  __shared__ float scratch[device::kMaxWarpsPerBlock + 1];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * dim;
  float* row = hidden + offset;
  float sum_squares = 0.0f;
  if (x != nullptr) {
    const float* add = x + offset;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float h = row[i] + add[i];
      row[i] = h;
      sum_squares += h * h;
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum_squares += row[i] * row[i];
  }
  sum_squares = device::block_sum(sum_squares, scratch);
  const float inv_rms = rsqrtf(sum_squares / static_cast<float>(dim) + eps);
  float* dst = out + offset;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = row[i] * inv_rms * device::to_float(weight[i]);
}

template <class W>
cudaError_t launch_rmsnorm(float* hidden, const float* x, const void* weight, float* out, int64_t num_rows,
                           int64_t dim, float eps, cudaStream_t stream) {
  LLMK_LAUNCH(static_cast<unsigned>(num_rows), kRmsnormThreads, 0, stream, rmsnorm_kernel<W>)(
      hidden, x, static_cast<const W*>(weight), out, dim, eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rmsnorm(float* hidden, const float* x, const void* weight, DType weight_dtype, float* out,
                    int64_t num_rows, int64_t dim, float eps, cudaStream_t stream) {
  if (num_rows < 0 || dim <= 0) return cudaErrorInvalidValue;
  if (num_rows == 0) return cudaSuccess;
  switch (weight_dtype) {
    case DType::f32:
      return launch_rmsnorm<float>(hidden, x, weight, out, num_rows, dim, eps, stream);
    case DType::f16:
      return launch_rmsnorm<__half>(hidden, x, weight, out, num_rows, dim, eps, stream);
    case DType::bf16:
      return launch_rmsnorm<__nv_bfloat16>(hidden, x, weight, out, num_rows, dim, eps, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace llmk::cuda
