#include "core/rope_scaling.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.hpp"

namespace llmk {

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  const RopeScaling& r = c.rope_scaling;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / c.head_dim);
    if (r.type == RopeScalingType::linear) {
      f /= r.factor;
    } else if (r.type == RopeScalingType::llama3) {
      const double original = r.original_max_position_embeddings;
      const double wavelength = 2.0 * std::numbers::pi / f;
      if (wavelength > original / r.low_freq_factor) {
        f /= r.factor;
      } else if (!(wavelength < original / r.high_freq_factor)) {
        const double s = (original / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1.0 - s) * f / r.factor + s * f;
      }
    }
    inv[static_cast<size_t>(i)] = f;
  }
  if (!r.freq_factors.empty()) {
    if (static_cast<int64_t>(r.freq_factors.size()) != half)
      throw Error(ErrorCode::bad_checkpoint, "rope frequency factors: " + std::to_string(r.freq_factors.size()) +
                                                 " values for a head of " + std::to_string(c.head_dim) +
                                                 " (needs head_dim / 2)");
    for (int64_t i = 0; i < half; ++i) {
      const double d = r.freq_factors[static_cast<size_t>(i)];
      if (!(d > 0.0) || !std::isfinite(d))
        throw Error(ErrorCode::bad_checkpoint,
                    "rope frequency factor " + std::to_string(i) + " is " + std::to_string(d) + " (must be positive)");
      inv[static_cast<size_t>(i)] /= d;
    }
  }
  return inv;
}

void rope_tables(const ModelConfig& c, int64_t max_positions, float* cos_table, float* sin_table) {
  const std::vector<double> inv = rope_inv_freq(c);
  const int64_t half = static_cast<int64_t>(inv.size());
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv[static_cast<size_t>(i)];
      cos_table[p * half + i] = static_cast<float>(std::cos(angle));
      sin_table[p * half + i] = static_cast<float>(std::sin(angle));
    }
}

}  // namespace llmk
