// c = a * b with 16x16 shared-memory tiles (the classic tiled matmul), and a
// copy that leaves out the barrier after each tile's products.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

constexpr int tile = 16;

// a: [m, k], b: [k, n], c: [m, n] row-major; block (16, 16), grid over c.
template <bool with_second_barrier>
__global__ void matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                    int m, int n, int k) {
  __shared__ float a_tile[tile][tile];
  __shared__ float b_tile[tile][tile + 1];  // padded: column reads avoid bank conflicts
  const int row = blockIdx.y * tile + threadIdx.y, col = blockIdx.x * tile + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += tile) {
    const int ak = k0 + threadIdx.x, bk = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] = row < m && ak < k ? a[static_cast<size_t>(row) * k + ak] : 0.0f;
    b_tile[threadIdx.y][threadIdx.x] = bk < k && col < n ? b[static_cast<size_t>(bk) * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < tile; ++i) acc += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
    if (with_second_barrier) __syncthreads();
  }
  if (row < m && col < n) c[static_cast<size_t>(row) * n + col] = acc;
}

void launch(bool correct, const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
  const dim3 block(tile, tile), grid((n + tile - 1) / tile, (m + tile - 1) / tile);
  if (correct)
    LLMK_LAUNCH(grid, block, 0, stream, matmul_tiled_kernel<true>)(a, b, c, m, n, k);
  else
    LLMK_LAUNCH(grid, block, 0, stream, matmul_tiled_kernel<false>)(a, b, c, m, n, k);
}

}  // namespace

void matmul_tiled(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
  launch(true, a, b, c, m, n, k, stream);
}

void matmul_tiled_missing_sync(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
  launch(false, a, b, c, m, n, k, stream);
}

}  // namespace llmk::cudasim_test
