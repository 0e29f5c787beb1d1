// linear_panels64: y = x W^T over weights repacked once at load into
// 64-channel panels (the family and its naming: kernels/cpu/linear.hpp).
// Panel p holds output features [64p, 64p + 64) as [in_features][64]
// (zero-padded past out_features), so one k step reads 64 contiguous weights
// and multiplies them with one broadcast activation. pack_panels64 and
// panels64_size (kernels/cpu/linear.hpp) make and size the packed form.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear.hpp"
#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// Floats of scratch linear_panels64 needs for num_threads threads.
size_t panels64_scratch_size(int num_threads);

// y[m, n] = sum_k x[m, k] * float(w[n, k]), with w in panel form.
// x: [num_rows, in_features] f32; y: [num_rows, out_features] f32 (overwritten);
// w_dtype: LLMK_DTYPE_F16 or BF16 (widened exactly; F32 accumulation) or F32;
// scratch: [panels64_scratch_size(num_threads)].
// Threads split the panels. Returns false for another dtype.
bool linear_panels64(const float* x, int64_t num_rows, int64_t in_features, const void* packed, llmk_dtype w_dtype,
                     int64_t out_features, float* y, float* scratch, int num_threads);

}  // namespace llmk::kernels::cpu
