// Rotary frequencies of a model: rope_theta, then its rope scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_config.hpp"

namespace llmk {

// inv_freq[i] for i in [0, head_dim / 2), in double: theta^(-2i / head_dim),
// then
//   linear: / factor;
//   llama3: with wavelength w = 2 pi / inv_freq and L = original context,
//           w < L / high_freq_factor kept, w > L / low_freq_factor divided
//           by factor, in between (1 - s) inv_freq / factor + s inv_freq with
//           s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor);
// then divided by freq_factors[i] when given (GGUF's rope_freqs).
// Throws Error(bad_checkpoint) when freq_factors has the wrong length or a
// non-positive entry.
std::vector<double> rope_inv_freq(const ModelConfig& config);

// cos/sin of position * inv_freq[i] for every position below max_positions,
// computed in double and stored as float. cos_table, sin_table:
// [max_positions, head_dim / 2] (the layout kernels/cpu/rope.hpp reads).
void rope_tables(const ModelConfig& config, int64_t max_positions, float* cos_table, float* sin_table);

}  // namespace llmk
