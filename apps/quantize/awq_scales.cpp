#include "apps/quantize/awq_scales.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/quantize/calib_forward.hpp"

namespace llmk::quantize {

AwqScales awq_search(const float* x, int64_t rows, int64_t in, const std::vector<const float*>& weights,
                     const std::vector<int64_t>& outs, const QuantSpec& spec, int grid) {
  const int64_t group = spec.group_for(in);
  std::vector<double> x_mean(static_cast<size_t>(in), 0.0), w_mean(static_cast<size_t>(in), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < in; ++c) x_mean[static_cast<size_t>(c)] += std::fabs(x[r * in + c]);
  int64_t total_rows = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    for (int64_t n = 0; n < outs[i]; ++n) {
      const float* row = weights[i] + n * in;
      for (int64_t g = 0; g < in; g += group) {
        float mx = 0.0f;
        for (int64_t c = g; c < g + group; ++c) mx = std::max(mx, std::fabs(row[c]));
        for (int64_t c = g; c < g + group; ++c) w_mean[static_cast<size_t>(c)] += mx > 0 ? std::fabs(row[c]) / mx : 0.0;
      }
    }
    total_rows += outs[i];
  }
  for (int64_t c = 0; c < in; ++c) {
    x_mean[static_cast<size_t>(c)] /= static_cast<double>(std::max<int64_t>(rows, 1));
    w_mean[static_cast<size_t>(c)] /= static_cast<double>(std::max<int64_t>(total_rows, 1));
  }
  // The layers' float outputs, and the error of each candidate's rounded weights against them.
  std::vector<std::vector<float>> ref(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    ref[i].resize(static_cast<size_t>(rows * outs[i]));
    linear(x, rows, weights[i], outs[i], in, ref[i].data());
  }
  auto error_of = [&](const std::vector<float>& s) {
    double sum = 0.0;
    std::vector<float> scaled, y;
    for (size_t i = 0; i < weights.size(); ++i) {
      const int64_t out = outs[i];
      scaled.assign(weights[i], weights[i] + out * in);
      for (int64_t n = 0; n < out; ++n)
        for (int64_t c = 0; c < in; ++c) scaled[static_cast<size_t>(n * in + c)] *= s[static_cast<size_t>(c)];
      QuantizedLinear q = rtn_quantize(scaled.data(), out, in, spec);
      for (int64_t n = 0; n < out; ++n)
        for (int64_t c = 0; c < in; ++c) q.dequantized[static_cast<size_t>(n * in + c)] /= s[static_cast<size_t>(c)];
      y.resize(static_cast<size_t>(rows * out));
      linear(x, rows, q.dequantized.data(), out, in, y.data());
      for (size_t j = 0; j < y.size(); ++j) {
        const double d = static_cast<double>(y[j]) - ref[i][j];
        sum += d * d;
      }
    }
    return sum / static_cast<double>(std::max<int64_t>(rows, 1));
  };
  AwqScales best;
  best.scales.assign(static_cast<size_t>(in), 1.0f);
  best.rtn_error = best.error = error_of(best.scales);
  std::vector<float> s(static_cast<size_t>(in));
  for (int step = 0; step < grid; ++step) {
    const double r = static_cast<double>(step) / grid;
    double lo = std::numeric_limits<double>::max(), hi = 0.0;
    std::vector<double> raw(static_cast<size_t>(in));
    for (int64_t c = 0; c < in; ++c) {
      const double v = std::pow(x_mean[static_cast<size_t>(c)], r) /
                       std::pow(std::max(w_mean[static_cast<size_t>(c)], 1e-12), 1.0 - r);
      raw[static_cast<size_t>(c)] = std::max(v, 1e-4);
      lo = std::min(lo, raw[static_cast<size_t>(c)]);
      hi = std::max(hi, raw[static_cast<size_t>(c)]);
    }
    const double norm = std::sqrt(lo * hi);
    for (int64_t c = 0; c < in; ++c) s[static_cast<size_t>(c)] = static_cast<float>(raw[static_cast<size_t>(c)] / norm);
    const double e = error_of(s);
    if (e < best.error) best.error = e, best.scales = s, best.ratio = r;
  }
  return best;
}

}  // namespace llmk::quantize
