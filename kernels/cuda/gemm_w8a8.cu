// W8A8 GEMM (contract in gemm_w8a8.hpp).
#include "cuda_compat.hpp"
#include "gemm_w8a8.hpp"

namespace llmk::cuda {
namespace {

constexpr int kThreads = 256;      // 16 x 16
constexpr int kTileWords = 16;     // k per shared tile: 16 words = 64 int8
constexpr int kPad = 1;            // a word of padding per tile row: no bank conflicts on the weight tile

// A block computes a (16 rows_per_thread) x (16 cols_per_thread) tile of y.
// xq: [num_rows, k_pad], wq: [out_features, k_pad] (read as words),
// x_scale: [num_rows], w_scale: [out_features], y: [num_rows, out_features].
template <int rows_per_thread, int cols_per_thread>
__global__ void __launch_bounds__(kThreads, 1) gemm_w8a8_kernel(const int* __restrict__ xq, const float* __restrict__ x_scale, int64_t num_rows,
                                 const int* __restrict__ wq, const float* __restrict__ w_scale, int64_t out_features,
                                 int64_t k_words, float* __restrict__ y) {
  constexpr int tile_rows = 16 * rows_per_thread, tile_cols = 16 * cols_per_thread;
  __shared__ int xs[tile_rows][kTileWords + kPad];
  __shared__ int ws[tile_cols][kTileWords + kPad];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * tile_rows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * tile_cols;

  int acc[rows_per_thread][cols_per_thread] = {};
  for (int64_t kw0 = 0; kw0 < k_words; kw0 += kTileWords) {
    // Stage the tiles; out-of-range words are zero (they add nothing).
    for (int i = threadIdx.x; i < tile_rows * kTileWords; i += kThreads) {
      const int r = i / kTileWords, w = i % kTileWords;
      const int64_t gr = row0 + r, gw = kw0 + w;
      xs[r][w] = gr < num_rows && gw < k_words ? xq[gr * k_words + gw] : 0;
    }
    for (int i = threadIdx.x; i < tile_cols * kTileWords; i += kThreads) {
      const int c = i / kTileWords, w = i % kTileWords;
      const int64_t gc = col0 + c, gw = kw0 + w;
      ws[c][w] = gc < out_features && gw < k_words ? wq[gc * k_words + gw] : 0;
    }
    __syncthreads();
    for (int w = 0; w < kTileWords; ++w) {
      int a[rows_per_thread], b[cols_per_thread];
      for (int i = 0; i < rows_per_thread; ++i) a[i] = xs[ty + 16 * i][w];
      for (int j = 0; j < cols_per_thread; ++j) b[j] = ws[tx + 16 * j][w];
      for (int i = 0; i < rows_per_thread; ++i)
        for (int j = 0; j < cols_per_thread; ++j) acc[i][j] = __dp4a(a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the next stage overwrites the tiles
  }
  for (int i = 0; i < rows_per_thread; ++i) {
    const int64_t r = row0 + ty + 16 * i;
    if (r >= num_rows) continue;
    for (int j = 0; j < cols_per_thread; ++j) {
      const int64_t c = col0 + tx + 16 * j;
      if (c < out_features) y[r * out_features + c] = static_cast<float>(acc[i][j]) * x_scale[r] * w_scale[c];
    }
  }
}

template <int rows_per_thread, int cols_per_thread>
void launch(const int8_t* xq, const float* x_scale, int64_t num_rows, const int8_t* wq, const float* w_scale,
            int64_t out_features, int64_t k_pad, float* y, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((out_features + 16 * cols_per_thread - 1) / (16 * cols_per_thread)),
                  static_cast<unsigned>((num_rows + 16 * rows_per_thread - 1) / (16 * rows_per_thread)));
  LLMK_LAUNCH(grid, kThreads, 0, stream, gemm_w8a8_kernel<rows_per_thread, cols_per_thread>)(
      reinterpret_cast<const int*>(xq), x_scale, num_rows, reinterpret_cast<const int*>(wq), w_scale, out_features,
      k_pad / 4, y);
}

}  // namespace

cudaError_t gemm_w8a8(const int8_t* xq, const float* x_scale, int64_t num_rows, const int8_t* wq,
                      const float* w_scale, int64_t out_features, int64_t k_pad, float* y, cudaStream_t stream) {
  if (num_rows <= 0 || out_features <= 0) return cudaSuccess;
  if (k_pad <= 0 || k_pad % 16 != 0) return cudaErrorInvalidValue;
  if (num_rows <= kW8A8SmallRows) launch<1, 1>(xq, x_scale, num_rows, wq, w_scale, out_features, k_pad, y, stream);
  else launch<2, 4>(xq, x_scale, num_rows, wq, w_scale, out_features, k_pad, y, stream);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
