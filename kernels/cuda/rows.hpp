// Row moves of the CUDA forward: splitting the fused q/k/v rows, adding a
// bias to every row, gathering the logits rows. Pointers are device memory;
// every launcher enqueues on `stream` and returns the launch's error.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace llmk::cuda {

// dst[r, 0:cols] = src[r, 0:cols] for r < num_rows (row strides in floats).
cudaError_t copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int32_t num_rows,
                      int32_t cols, cudaStream_t stream);

// x[r, c] += bias[c]; x: [num_rows, row_stride], bias: [cols].
cudaError_t add_bias_rows(float* x, int64_t row_stride, const float* bias, int32_t num_rows, int32_t cols,
                          cudaStream_t stream);

// dst[i, :] = src[rows[i], :] for i < num_out; rows: [num_out] int32 (device);
// src, dst: [*, cols] contiguous, distinct.
cudaError_t gather_rows(const float* src, const int32_t* rows, float* dst, int32_t num_out, int32_t cols,
                        cudaStream_t stream);

}  // namespace llmk::cuda
