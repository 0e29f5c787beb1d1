// Row moves: one block per row, threads across the columns. Memory-bound;
// each element is read and written once (8 bytes per float moved).
#include "cuda_compat.hpp"
#include "rows.hpp"

namespace llmk::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads, 1) copy_rows_kernel(const float* __restrict__ src, int64_t src_stride, float* __restrict__ dst,
                                 int64_t dst_stride, int cols) {
  const float* in = src + static_cast<int64_t>(blockIdx.x) * src_stride;
  float* out = dst + static_cast<int64_t>(blockIdx.x) * dst_stride;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c];
}

__global__ void __launch_bounds__(kThreads, 1) add_bias_kernel(float* __restrict__ x, int64_t row_stride, const float* __restrict__ bias, int cols) {
  float* row = x + static_cast<int64_t>(blockIdx.x) * row_stride;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += bias[c];
}

__global__ void __launch_bounds__(kThreads, 1) gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                   float* __restrict__ dst, int cols) {
  const float* in = src + static_cast<int64_t>(rows[blockIdx.x]) * cols;
  float* out = dst + static_cast<int64_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = in[c];
}

int threads_for(int32_t cols) { return cols >= kThreads ? kThreads : ((cols + 31) / 32) * 32; }

}  // namespace

cudaError_t copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int32_t num_rows,
                      int32_t cols, cudaStream_t stream) {
  if (num_rows <= 0 || cols <= 0) return cudaSuccess;
  LLMK_LAUNCH(num_rows, threads_for(cols), 0, stream, copy_rows_kernel)(src, src_stride, dst, dst_stride, cols);
  return cudaGetLastError();
}

cudaError_t add_bias_rows(float* x, int64_t row_stride, const float* bias, int32_t num_rows, int32_t cols,
                          cudaStream_t stream) {
  if (num_rows <= 0 || cols <= 0) return cudaSuccess;
  LLMK_LAUNCH(num_rows, threads_for(cols), 0, stream, add_bias_kernel)(x, row_stride, bias, cols);
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* src, const int32_t* rows, float* dst, int32_t num_out, int32_t cols,
                        cudaStream_t stream) {
  if (num_out <= 0 || cols <= 0) return cudaSuccess;
  LLMK_LAUNCH(num_out, threads_for(cols), 0, stream, gather_rows_kernel)(src, rows, dst, cols);
  return cudaGetLastError();
}

}  // namespace llmk::cuda
