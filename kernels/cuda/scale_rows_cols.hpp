// The dequantizing epilogue of a scaled GEMM whose library call cannot apply
// per-row or per-column scales itself (FP8 through cuBLASLt with per-token
// activation or per-channel weight scales):
//   y[r, c] = acc[r, c] * row_scale[r] * col_scale[c]
// with a null row_scale or col_scale meaning 1. acc: [num_rows, ld_acc] f32
// (ld_acc >= num_cols), y: [num_rows, num_cols] f32; they may be the same
// memory when ld_acc == num_cols (each element is read, then written, by one
// thread). Grid-stride, 256 threads a block; no allocation, no sync.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace llmk::cuda {

cudaError_t scale_rows_cols(const float* acc, int64_t ld_acc, const float* row_scale, const float* col_scale,
                            int64_t num_rows, int64_t num_cols, float* y, cudaStream_t stream);

}  // namespace llmk::cuda
