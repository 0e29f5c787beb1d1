// Shuffles and votes, one record per thread (see the column list below).
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// values: [num_threads]; out: [num_threads, 8]:
//   0 __shfl_sync from lane (lane + 3) % 32        1 __shfl_xor_sync with mask 5
//   2 __shfl_down_sync by 4 (own value past the end) 3 __shfl_up_sync by 2, width 8
//   4 __ballot_sync(value is odd) 5 __any_sync(value > 90) 6 __all_sync(value >= 0)
//   7 threadIdx.x + blockDim.x * blockIdx.x (the coordinates)
// One warp per block of 32 threads; blocks over num_threads.
__global__ void warp_ops_kernel(const int* __restrict__ values, int* __restrict__ out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % warpSize;
  const int v = values[t];
  int* o = out + static_cast<size_t>(t) * 8;
  o[0] = __shfl_sync(0xffffffffu, v, (lane + 3) % 32);
  o[1] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[2] = __shfl_down_sync(0xffffffffu, v, 4);
  o[3] = __shfl_up_sync(0xffffffffu, v, 2, 8);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, v % 2 != 0));
  o[5] = __any_sync(0xffffffffu, v > 90);
  o[6] = __all_sync(0xffffffffu, v >= 0);
  o[7] = threadIdx.x + blockDim.x * blockIdx.x;
}

}  // namespace

void warp_ops(const int* values, int* out, int num_threads, cudaStream_t stream) {
  LLMK_LAUNCH(num_threads / 32, 32, 0, stream, warp_ops_kernel)(values, out);
}

}  // namespace llmk::cudasim_test
