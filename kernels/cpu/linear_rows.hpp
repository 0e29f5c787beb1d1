// linear_rows: y = x W^T with W as the checkpoint stores it (the family and
// its naming: kernels/cpu/linear.hpp).
#pragma once

#include <cstdint>

#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// y[m, n] = sum_k x[m, k] * float(w[n, k])
// x: [num_rows, in_features] f32; w: [out_features, in_features] of w_dtype
// (LLMK_DTYPE_F32, F16 or BF16; converted exactly to f32 in registers);
// y: [num_rows, out_features] f32, overwritten.
//
// Written for the memory-bound case (decode: a few rows): each weight row is
// read once per call and multiplied with up to four activation rows while in
// registers. Threads split the output features. With many rows it stays
// correct and exact but runs well below a blocked GEMM. Returns false for an
// unsupported dtype.
bool linear_rows(const float* x, int64_t num_rows, int64_t in_features, const void* w, llmk_dtype w_dtype,
                 int64_t out_features, float* y, int num_threads);

}  // namespace llmk::kernels::cpu
