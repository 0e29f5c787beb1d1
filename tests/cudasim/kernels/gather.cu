// out[i] = in[index[i]], one thread per element: the bounds-check tests'
// kernel (an index past the input, or a thread count past the output, is
// the off-by-one the simulation must catch).
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// in: [any], read only where index points; index, out: [num_threads].
__global__ void gather_kernel(const float* __restrict__ in, const int* __restrict__ index, float* __restrict__ out,
                              int num_threads) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < num_threads) out[i] = in[index[i]];
}

}  // namespace

void gather(const float* in, const int* index, float* out, int num_threads, cudaStream_t stream) {
  LLMK_LAUNCH((num_threads + 63) / 64, 64, 0, stream, gather_kernel)(in, index, out, num_threads);
}

}  // namespace llmk::cudasim_test
