// y = alpha * x + y, one thread per element: the graph-capture tests' kernel.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// x, y: [n].
__global__ void axpy_kernel(float alpha, const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + y[i];
}

}  // namespace

void axpy(float alpha, const float* x, float* y, int n, cudaStream_t stream) {
  LLMK_LAUNCH((n + 127) / 128, 128, 0, stream, axpy_kernel)(alpha, x, y, n);
}

}  // namespace llmk::cudasim_test
