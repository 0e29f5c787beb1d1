// Block Walsh-Hadamard rotation (contract in hadamard.hpp).
#include "cuda_compat.hpp"
#include "hadamard.hpp"

#include <cmath>

namespace llmk::cuda {
namespace {

// One block of x per CUDA block; thread t does butterfly t of every pass:
// in the pass of span s, pair (i, i + s) with i = (t / s) * 2 s + t % s.
__global__ void __launch_bounds__(kHadamardMaxBlock / 2, 1) hadamard_kernel(float* __restrict__ x, int block, float norm) {
  LLMK_DYNAMIC_SHARED(float, v);
  float* base = x + static_cast<int64_t>(blockIdx.x) * block;
  const int t = threadIdx.x;
  v[2 * t] = base[2 * t];
  v[2 * t + 1] = base[2 * t + 1];
  __syncthreads();
  for (int span = 1; span < block; span *= 2) {
    const int i = (t / span) * 2 * span + t % span;
    const float a = v[i], b = v[i + span];
    v[i] = a + b;
    v[i + span] = a - b;
    __syncthreads();
  }
  base[2 * t] = v[2 * t] * norm;
  base[2 * t + 1] = v[2 * t + 1] * norm;
}

}  // namespace

cudaError_t hadamard_blocks(float* x, int64_t n, int64_t block, cudaStream_t stream) {
  if (block < 1 || block > kHadamardMaxBlock || (block & (block - 1)) != 0 || n < 0 || n % block != 0)
    return cudaErrorInvalidValue;
  if (n == 0 || block == 1) return cudaSuccess;
  // The CPU kernel's factor: 1 / sqrtf(block), rounded once.
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  LLMK_LAUNCH(static_cast<unsigned>(n / block), static_cast<unsigned>(block / 2), block * sizeof(float), stream,
              hadamard_kernel)(x, static_cast<int>(block), norm);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
