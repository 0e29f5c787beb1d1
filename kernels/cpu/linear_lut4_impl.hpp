// Internals of the lookup-table 4-bit linear (kernels/cpu/linear_lut4.hpp),
// shared by linear_lut4.cpp (codebooks, quantizing, packing, the portable
// kernels, dispatch) and linear_lut4_units.cpp (the AVX-512 VNNI and AVX2
// units, run by linear_gguf's row-tile pass).
#pragma once

#include <cstdint>

#include "kernels/cpu/linear_lut4.hpp"

namespace llmk::kernels::cpu::lut4 {

// NF4: bitsandbytes' quant_map (the QLoRA paper's NormalFloat values) as
// f32; IQ4_NL: ggml's kvalues_iq4nl.
inline constexpr float kNf4Values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
    1.0f};
// round(127 * kNf4Values): each within 0.5 / 127 of its value times 127.
inline constexpr int8_t kNf4Levels[16] = {-127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127};
inline constexpr int8_t kIq4NlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Bytes of one row's activations in scratch, per 64-input unit, in every
// path: linear_gguf's pair record (256 bytes), 64 padded f32, or the
// portable path's 64 int8 and two f32 scales.
constexpr int64_t kActUnitBytes = 256;

// The native (per-CPU-level) pass; false where this build has none (then
// the portable kernels run). act: rows rounded (int8: linear_gguf's pair
// records) or padded (f32) in scratch, num_units * kActUnitBytes per row.
bool native_round(Lut4Activations a, const float* x, int64_t num_rows, const Lut4Shape& s, uint8_t* act,
                  int num_threads);
void native_pass(Lut4Activations a, Lut4Book book, const uint8_t* act, int64_t num_rows, const Lut4Shape& s,
                 const uint8_t* packed, float* y, int num_threads);

}  // namespace llmk::kernels::cpu::lut4
