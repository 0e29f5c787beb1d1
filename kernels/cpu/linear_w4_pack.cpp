// Packing 4-bit weights for linear_w4 (linear_w4.hpp): per group a scale
// and zero point fitted to the group's range (min/max, or the range a mean
// squared error search shrinks it to), the nibbles in panels of 16 channels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/linear_w4.hpp"

namespace llmk::kernels::cpu {
namespace {

constexpr int kShrinkSteps = 25;       // candidate ranges of the MSE search besides the full one
constexpr float kShrinkStep = 0.01f;  // the range scales by 1 - i * kShrinkStep, down to 0.75

// Squared error of a group under (scale, zero) with nearest rounding. f32 is
// enough to rank candidates; the packer rounds again in float64.
float group_error(const float* w, int64_t n, float sc, float z) {
  const float inv = 1.0f / sc;
  float err = 0.0f;
#pragma omp simd reduction(+ : err)
  for (int64_t k = 0; k < n; ++k) {
    const float q = std::min(std::max(std::nearbyint(w[k] * inv) + z, 0.0f), 15.0f);
    const float d = w[k] - (q - z) * sc;
    err += d * d;
  }
  return err;
}

// Scale and zero point of the range [lo, hi] (lo <= 0 <= hi), the zero point
// computed from the scale as stored (f32).
W4Group group_of_range(double lo, double hi) {
  const auto sc = static_cast<float>((hi - lo) / 15.0);
  if (!(sc > 0.0f)) return {0.0f, 0};
  return {sc, static_cast<uint8_t>(std::clamp(std::nearbyint(-lo / sc), 0.0, 15.0))};
}

}  // namespace

W4Group w4_fit_group(const float* w, int64_t n, W4Range range) {
  double lo = 0.0, hi = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    lo = std::min(lo, static_cast<double>(w[k]));
    hi = std::max(hi, static_cast<double>(w[k]));
  }
  W4Group best = group_of_range(lo, hi);
  if (range == W4Range::min_max || best.scale == 0.0f) return best;
  float best_err = group_error(w, n, best.scale, best.zero);
  for (int i = 1; i <= kShrinkSteps; ++i) {
    const double f = 1.0 - i * static_cast<double>(kShrinkStep);
    const W4Group g = group_of_range(f * lo, f * hi);
    if (g.scale == 0.0f) break;
    const float err = group_error(w, n, g.scale, g.zero);
    if (err < best_err) best = g, best_err = err;
  }
  return best;
}

void pack_w4(const float* w, const W4Shape& s, uint32_t* packed, float* scale, uint8_t* zero, W4Range range) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  std::memset(packed, 0, w4_size(s) * sizeof(uint32_t));
  std::fill(scale, scale + s.group_params(), 0.0f);
  std::fill(zero, zero + s.group_params(), uint8_t{0});
  // Rows are independent (each writes only its own nibbles): pack them in parallel at load.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < s.out_features; ++n) {
    const float* row = w + n * s.in_features;
    for (int64_t g = 0; g < num_groups; ++g) {
      const int64_t k0 = g * s.group_size, k1 = std::min(s.in_features, k0 + s.group_size);
      const W4Group fit = w4_fit_group(row + k0, k1 - k0, range);
      const double sc = fit.scale, z = fit.zero;
      scale[w4_param_index(s, n, g)] = fit.scale;
      zero[w4_param_index(s, n, g)] = fit.zero;
      for (int64_t k = k0; k < k1; ++k) {
        const double q = sc > 0.0 ? std::clamp(std::nearbyint(row[k] / sc) + z, 0.0, 15.0) : z;
        packed[((n / kPanels16Width) * num_octets + k / 8) * kPanels16Width + n % kPanels16Width] |=
            static_cast<uint32_t>(q) << (4 * (k % 8));
      }
    }
  }
}

}  // namespace llmk::kernels::cpu
