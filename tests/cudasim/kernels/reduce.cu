// Row sums, three ways: warp shuffles, a shared-memory tree, and the tree
// with its barrier left out (the race check must flag that one). Also a
// hand-off within a warp ordered by a shuffle alone, which orders no memory.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// x: [num_rows, n]; out: [num_rows]. blockDim.x a multiple of 32.
__global__ void row_sum_shuffle_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float warp_totals[32];
  const float* row = x + static_cast<size_t>(blockIdx.x) * n;
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += row[i];
  v = warp_sum(v);
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int num_warps = blockDim.x / warpSize;
    v = lane < num_warps ? warp_totals[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

// blockDim.x a power of two; dynamic shared memory: blockDim.x floats.
template <bool with_barrier>
__global__ void row_sum_tree_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
  LLMK_DYNAMIC_SHARED(float, partial);
  const float* row = x + static_cast<size_t>(blockIdx.x) * n;
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += row[i];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    const int t = threadIdx.x;
    if (t < stride) partial[t] += partial[t + stride];
    if (with_barrier) __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Lane 1 reads a shared word, lanes 0 and 1 swap values with a shuffle, and
// lane 0 overwrites the word: only a __syncwarp orders the write after the
// read. One warp; out[0] = the word's first value (2.5) plus lane 0's own
// contribution (0.5) = 3.
template <bool with_syncwarp>
__global__ void pair_handoff_kernel(float* __restrict__ out) {
  __shared__ float word;
  const int lane = threadIdx.x % warpSize;
  if (lane == 0) word = 2.5f;
  __syncthreads();
  const float mine = lane == 1 ? word : 0.5f;
  const float theirs = __shfl_xor_sync(0xffffffffu, mine, 1);
  if (with_syncwarp) __syncwarp();
  if (lane == 0) word = mine + theirs;
  __syncthreads();
  if (lane == 0) out[0] = word;
}

}  // namespace

void pair_handoff(float* out, bool with_syncwarp, cudaStream_t stream) {
  if (with_syncwarp) LLMK_LAUNCH(1, 32, 0, stream, pair_handoff_kernel<true>)(out);
  else LLMK_LAUNCH(1, 32, 0, stream, pair_handoff_kernel<false>)(out);
}

void row_sum_shuffle(const float* x, float* out, int num_rows, int n, int num_threads, cudaStream_t stream) {
  LLMK_LAUNCH(num_rows, num_threads, 0, stream, row_sum_shuffle_kernel)(x, out, n);
}

void row_sum_tree(const float* x, float* out, int num_rows, int n, int num_threads, cudaStream_t stream) {
  LLMK_LAUNCH(num_rows, num_threads, num_threads * sizeof(float), stream, row_sum_tree_kernel<true>)(x, out, n);
}

void row_sum_tree_missing_sync(const float* x, float* out, int num_rows, int n, int num_threads,
                               cudaStream_t stream) {
  LLMK_LAUNCH(num_rows, num_threads, num_threads * sizeof(float), stream, row_sum_tree_kernel<false>)(x, out, n);
}

}  // namespace llmk::cudasim_test
