// Row and column scaling epilogue (contract in scale_rows_cols.hpp).
#include "cuda_compat.hpp"
#include "scale_rows_cols.hpp"

namespace llmk::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// acc: [num_rows, ld_acc], row_scale: [num_rows] or null, col_scale: [num_cols]
// or null, y: [num_rows, num_cols]. No __restrict__: acc may be y.
__global__ void __launch_bounds__(kThreads, 1) scale_rows_cols_kernel(const float* acc, int64_t ld_acc, const float* row_scale,
                                       const float* col_scale, int64_t num_rows, int64_t num_cols, float* y) {
  const int64_t n = num_rows * num_cols, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / num_cols, c = i % num_cols;
    float v = acc[r * ld_acc + c];
    if (row_scale != nullptr) v *= row_scale[r];
    if (col_scale != nullptr) v *= col_scale[c];
    y[i] = v;
  }
}

}  // namespace

cudaError_t scale_rows_cols(const float* acc, int64_t ld_acc, const float* row_scale, const float* col_scale,
                            int64_t num_rows, int64_t num_cols, float* y, cudaStream_t stream) {
  if (num_rows <= 0 || num_cols <= 0) return cudaSuccess;
  if (ld_acc < num_cols) return cudaErrorInvalidValue;
  const int64_t wanted = (num_rows * num_cols + kThreads - 1) / kThreads;
  const auto num_blocks = static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  LLMK_LAUNCH(num_blocks, kThreads, 0, stream, scale_rows_cols_kernel)(acc, ld_acc, row_scale, col_scale, num_rows,
                                                                      num_cols, y);
  return cudaGetLastError();
}

}  // namespace llmk::cuda

