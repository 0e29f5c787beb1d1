// Atomics: a shared-memory histogram merged into global counts, and
// atomicMax / float atomicAdd / atomicCAS / atomicExch on global memory.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// values: [n] in [0, num_bins); counts: [num_bins]; dynamic shared: num_bins unsigned.
__global__ void histogram_kernel(const int* __restrict__ values, unsigned* __restrict__ counts, int n, int num_bins) {
  LLMK_DYNAMIC_SHARED(unsigned, local);
  for (int b = threadIdx.x; b < num_bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[values[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < num_bins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&counts[b], local[b]);
}

// claims: [num_slots], -1 initially; each thread tries to claim slot i % num_slots
// with atomicCAS; the winner also swaps its id in with atomicExch (same value).
__global__ void atomic_misc_kernel(const int* __restrict__ values, const float* __restrict__ x, int n,
                                   int* __restrict__ max_out, float* __restrict__ sum_out, int* __restrict__ claims,
                                   int num_slots) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicMax(max_out, values[i]);
  atomicAdd(sum_out, x[i]);
  int* slot = &claims[i % num_slots];
  if (atomicCAS(slot, -1, i) == -1) atomicExch(slot, i);
}

}  // namespace

void histogram(const int* values, unsigned* counts, int n, int num_bins, cudaStream_t stream) {
  const int num_threads = 128, num_blocks = (n + 4 * num_threads - 1) / (4 * num_threads);
  LLMK_LAUNCH(num_blocks > 0 ? num_blocks : 1, num_threads, num_bins * sizeof(unsigned), stream, histogram_kernel)(
      values, counts, n, num_bins);
}

void atomic_misc(const int* values, const float* x, int n, int* max_out, float* sum_out, int* claims, int num_slots,
                 cudaStream_t stream) {
  const int num_threads = 96;
  LLMK_LAUNCH((n + num_threads - 1) / num_threads, num_threads, 0, stream, atomic_misc_kernel)(
      values, x, n, max_out, sum_out, claims, num_slots);
}

}  // namespace llmk::cudasim_test
