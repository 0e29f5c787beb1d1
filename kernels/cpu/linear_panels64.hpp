// linear_panels64: y = x W^T over weights repacked once at load into
// 64-channel panels (the family and its naming: kernels/cpu/linear.hpp).
// Panel p holds output features [64p, 64p + 64) (zero-padded past
// out_features), its elements ordered for the CPU level the kernels are
// built for:
//   AVX-512 and portable builds: [in_features][64], so one k step reads 64
//     contiguous weights (four 16-lane vectors) for one broadcast activation;
//   AVX2 builds: blocks of 256 k steps (the last one shorter), each as four
//     strips of 16 channels, [4][depth][16]: a strip is what one 6 x 16
//     register tile reads, contiguous, so the many-row path multiplies the
//     weights where they are (strips read from a [k][64] panel lie 256 bytes
//     apart per k step, on a quarter of L1's sets, and had to be copied out
//     first), and decode streams a panel front to back, strip after strip.
// Pack with the same level's pack_panels64; panels64_offset says where
// w[n, k] goes. panels64_size (kernels/cpu/linear.hpp) is the same for both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear.hpp"
#include "plugins/api/llmk_plugin.h"

namespace llmk::kernels::cpu {

// w: [out_features, in_features] (f32, or f16/bf16 bits) -> packed:
// [panels64_size(out_features, in_features)], zero past out_features.
void pack_panels64(const float* w, int64_t out_features, int64_t in_features, float* packed);
void pack_panels64(const uint16_t* w, int64_t out_features, int64_t in_features, uint16_t* packed);
// The element of the packed form that holds w[n, k].
int64_t panels64_offset(int64_t n, int64_t k, int64_t in_features);

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
