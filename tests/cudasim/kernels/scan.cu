// Inclusive prefix sums per row: warp scans with __shfl_up_sync, then the
// warp totals scanned by warp 0 through dynamic shared memory.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// x, y: [num_rows, n]; blockDim.x = n rounded up to 32; dynamic shared: 32 ints.
__global__ void scan_kernel(const int* __restrict__ x, int* __restrict__ y, int n) {
  LLMK_DYNAMIC_SHARED(int, warp_totals);
  const int t = threadIdx.x, lane = t % warpSize, warp = t / warpSize;
  const size_t row = blockIdx.x;
  int v = t < n ? x[row * n + t] : 0;
  for (int offset = 1; offset < warpSize; offset *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += up;
  }
  if (lane == warpSize - 1) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int num_warps = (blockDim.x + warpSize - 1) / warpSize;
    int total = lane < num_warps ? warp_totals[lane] : 0;
    for (int offset = 1; offset < warpSize; offset *= 2) {
      const int up = __shfl_up_sync(0xffffffffu, total, offset);
      if (lane >= offset) total += up;
    }
    __syncwarp();
    if (lane < num_warps) warp_totals[lane] = total;  // now inclusive totals per warp
  }
  __syncthreads();
  if (warp > 0) v += warp_totals[warp - 1];
  if (t < n) y[row * n + t] = v;
}

}  // namespace

void inclusive_scan_rows(const int* x, int* y, int num_rows, int n, cudaStream_t stream) {
  const int num_threads = (n + 31) / 32 * 32;
  LLMK_LAUNCH(num_rows, num_threads, 32 * sizeof(int), stream, scan_kernel)(x, y, n);
}

}  // namespace llmk::cudasim_test
