// SwiGLU (contract in silu_mul.hpp).
#include "cuda_compat.hpp"
#include "silu_mul.hpp"

namespace llmk::cuda {
namespace {

// gate_up: [num_rows, 2 * dim]; out: [num_rows, dim], flattened to n = num_rows * dim.
__global__ void __launch_bounds__(kSiluMulThreads, 1) silu_mul_kernel(const float* __restrict__ gate_up, float* __restrict__ out, int64_t dim, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int64_t row = j / dim, i = j % dim;
    const float* in = gate_up + row * 2 * dim;
    const float g = in[i];
    out[j] = g / (1.0f + __expf(-g)) * in[dim + i];
  }
}

}  // namespace

cudaError_t silu_mul(const float* gate_up, float* out, int64_t num_rows, int64_t dim, cudaStream_t stream) {
  if (num_rows < 0 || dim < 0) return cudaErrorInvalidValue;
  const int64_t n = num_rows * dim;
  if (n == 0) return cudaSuccess;
  const int64_t wanted = (n + kSiluMulThreads - 1) / kSiluMulThreads;
  const auto num_blocks = static_cast<unsigned>(wanted < kSiluMulMaxBlocks ? wanted : kSiluMulMaxBlocks);
  LLMK_LAUNCH(num_blocks, kSiluMulThreads, 0, stream, silu_mul_kernel)(gate_up, out, dim, n);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
