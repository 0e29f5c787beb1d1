#pragma once

#include <cstdint>

#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// Weights repacked once at load into column panels, for the exact F16/BF16
// GEMM: panel p holds output features [64p, 64p + 64) as [in_features][64]
// (zero-padded past out_features), so one k step reads 64 contiguous weights
// and multiplies them with one broadcast activation.
constexpr int64_t kPanelCols = 64;

// Elements of the packed form of a [out_features, in_features] weight.
int64_t packed_panels_size(int64_t out_features, int64_t in_features);

// w: [out_features, in_features] of 2-byte elements (F16 or BF16 bits) or
// floats; packed: [packed_panels_size(...)] of the same type.
void pack_panels(const uint16_t* w, uint16_t* packed, int64_t out_features, int64_t in_features);
void pack_panels(const float* w, float* packed, int64_t out_features, int64_t in_features);

// Floats of scratch matmul_packed needs for num_threads threads.
int64_t matmul_packed_scratch_floats(int num_threads);

// y[m, n] = sum_k x[m, k] * float(w[n, k]), with w in panel form.
// x: [num_rows, in_features] f32; y: [num_rows, out_features] f32 (overwritten);
// w_dtype: LLMK_DTYPE_F16 or BF16 (widened exactly; F32 accumulation) or F32;
// scratch: [matmul_packed_scratch_floats(num_threads)].
// Threads split the panels. Returns false for another dtype.
bool matmul_packed(const float* x, const void* packed, llmk_dtype w_dtype, float* y, int64_t num_rows,
                   int64_t in_features, int64_t out_features, int num_threads, float* scratch);

}  // namespace llmk::kernels::cpu
