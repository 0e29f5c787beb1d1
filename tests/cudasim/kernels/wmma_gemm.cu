// c = a * b on tensor-core tiles through the WMMA API: one warp per 16x16
// tile of c, staging each a/b tile through shared memory.
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

namespace wmma = nvcuda::wmma;
constexpr int tile = 16;

// a: [m, k] row-major, b: [k, n] column-major (element (kk, j) at b[j * k + kk]),
// c: [m, n] row-major float. Block: 32 threads; grid (n / 16, m / 16).
template <class T>
__global__ void wmma_gemm_kernel(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ c,
                                 int /*m: the grid covers it*/, int n, int k) {
  __shared__ __align__(32) T a_tile[tile * tile];
  __shared__ __align__(32) T b_tile[tile * tile];
  __shared__ __align__(32) float c_tile[tile * tile];
  const int row0 = blockIdx.y * tile, col0 = blockIdx.x * tile, lane = threadIdx.x;
  wmma::fragment<wmma::matrix_a, tile, tile, tile, T, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, tile, tile, tile, T, wmma::col_major> b_frag;
  wmma::fragment<wmma::accumulator, tile, tile, tile, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < k; k0 += tile) {
    for (int i = lane; i < tile * tile; i += 32) {
      const int r = i / tile, cc = i % tile;
      a_tile[i] = a[static_cast<size_t>(row0 + r) * k + k0 + cc];            // a_tile[r][cc], row-major
      b_tile[i] = b[static_cast<size_t>(col0 + r) * k + k0 + cc];            // b column r, rows k0..: col-major
    }
    __syncwarp();
    wmma::load_matrix_sync(a_frag, a_tile, tile);
    wmma::load_matrix_sync(b_frag, b_tile, tile);
    wmma::mma_sync(acc, a_frag, b_frag, acc);
    __syncwarp();
  }
  // Element-wise op on the accumulator: scale by 1 (checks x[] covers the tile).
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = acc.x[i] * 1.0f;
  wmma::store_matrix_sync(c_tile, acc, tile, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < tile * tile; i += 32)
    c[static_cast<size_t>(row0 + i / tile) * n + col0 + i % tile] = c_tile[i];
}

// d = a * a for one 16x16 tile read straight from global memory (a: row
// stride lda elements; d: row stride ldd floats), one warp: the WMMA
// pointer and ldm checks' kernel.
__global__ void wmma_square_tile_kernel(const __half* a, unsigned lda, float* d, unsigned ldd) {
  wmma::fragment<wmma::matrix_a, tile, tile, tile, __half, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, tile, tile, tile, __half, wmma::row_major> b_frag;
  wmma::fragment<wmma::accumulator, tile, tile, tile, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(a_frag, a, lda);
  wmma::load_matrix_sync(b_frag, a, lda);
  wmma::mma_sync(acc, a_frag, b_frag, acc);
  wmma::store_matrix_sync(d, acc, ldd, wmma::mem_row_major);
}

}  // namespace

void wmma_gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream) {
  LLMK_LAUNCH(dim3(n / tile, m / tile), 32, 0, stream, wmma_gemm_kernel<__half>)(a, b, c, m, n, k);
}

void wmma_gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k,
                    cudaStream_t stream) {
  LLMK_LAUNCH(dim3(n / tile, m / tile), 32, 0, stream, wmma_gemm_kernel<__nv_bfloat16>)(a, b, c, m, n, k);
}

void wmma_square_tile(const __half* a, unsigned lda, float* d, unsigned ldd, cudaStream_t stream) {
  LLMK_LAUNCH(1, 32, 0, stream, wmma_square_tile_kernel)(a, lda, d, ldd);
}

}  // namespace llmk::cudasim_test
