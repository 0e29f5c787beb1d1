#pragma once

#include <cstdint>

namespace llmk::kernels::cpu {

// Element conversions over contiguous arrays of n elements.
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);
// Round to nearest even (as torch's .to(bfloat16)); NaN stays NaN.
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void f32_to_f16(const float* src, uint16_t* dst, int64_t n);

}  // namespace llmk::kernels::cpu
