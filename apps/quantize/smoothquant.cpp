#include "apps/quantize/smoothquant.hpp"

#include <algorithm>
#include <cmath>

#include "apps/quantize/calib_forward.hpp"

namespace llmk::quantize {
namespace {

// Each row of x [rows, in] rounded to int8 with its own scale max|row| / 127, as floats.
std::vector<float> token_rounded(const float* x, int64_t rows, int64_t in) {
  std::vector<float> out(static_cast<size_t>(rows * in));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    float amax = 0.0f;
    for (int64_t c = 0; c < in; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t c = 0; c < in; ++c)
      out[static_cast<size_t>(r * in + c)] = std::clamp(std::nearbyint(row[c] * inv), -127.0f, 127.0f) * scale;
  }
  return out;
}

}  // namespace

std::vector<float> channel_abs_max(const float* x, int64_t rows, int64_t in) {
  std::vector<float> m(static_cast<size_t>(in), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < in; ++c) m[static_cast<size_t>(c)] = std::max(m[static_cast<size_t>(c)], std::fabs(x[r * in + c]));
  return m;
}

std::vector<float> column_abs_max(const std::vector<const float*>& weights, const std::vector<int64_t>& outs,
                                  int64_t in) {
  std::vector<float> m(static_cast<size_t>(in), 0.0f);
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::vector<float> part = channel_abs_max(weights[i], outs[i], in);
    for (size_t c = 0; c < m.size(); ++c) m[c] = std::max(m[c], part[c]);
  }
  return m;
}

std::vector<float> max_over_shared_heads(const std::vector<float>& v, int64_t num_heads, int64_t num_kv_heads,
                                         int64_t head_dim) {
  const int64_t per_kv = num_heads / num_kv_heads;
  std::vector<float> m(static_cast<size_t>(num_kv_heads * head_dim), 0.0f);
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < head_dim; ++i) {
      float& slot = m[static_cast<size_t>((h / per_kv) * head_dim + i)];
      slot = std::max(slot, v[static_cast<size_t>(h * head_dim + i)]);
    }
  return m;
}

std::vector<float> smooth_scales(const std::vector<float>& act_max, const std::vector<float>& weight_max, double alpha) {
  std::vector<float> s(act_max.size(), 1.0f);
  for (size_t c = 0; c < s.size(); ++c) {
    const double a = act_max[c], w = weight_max[c];
    if (a > 0.0 && w > 0.0) s[c] = static_cast<float>(std::pow(a, alpha) / std::pow(w, 1.0 - alpha));
  }
  return s;
}

QuantizedLinear int8_channel_quantize(const float* w, int64_t out, int64_t in) {
  QuantizedLinear r{IntGroupsWeight(8, static_cast<uint32_t>(in), static_cast<uint32_t>(out), static_cast<uint32_t>(in)),
                    std::vector<float>(static_cast<size_t>(out * in)), OutlierCsr{}};
  for (int64_t n = 0; n < out; ++n) {
    const float* row = w + n * in;
    double amax = 0.0;
    for (int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(static_cast<double>(row[k])));
    const float scale = static_cast<float>(amax / 127.0);
    const double inv = amax > 0.0 ? 127.0 / amax : 0.0;
    r.weight.scales[static_cast<size_t>(n)] = scale;
    r.weight.zeros[static_cast<size_t>(n)] = 128;
    for (int64_t k = 0; k < in; ++k) {
      const auto q = static_cast<int32_t>(std::clamp(std::nearbyint(row[k] * inv), -127.0, 127.0));
      r.weight.set_q(n, k, static_cast<uint32_t>(q + 128));
      r.dequantized[static_cast<size_t>(n * in + k)] = scale * static_cast<float>(q);
    }
  }
  return r;
}

double w8a8_error(const float* x, int64_t rows, int64_t in, const std::vector<const float*>& weights,
                  const std::vector<int64_t>& outs, const std::vector<float>& s) {
  std::vector<float> xs(x, x + rows * in);
  if (!s.empty())
    for (size_t i = 0; i < xs.size(); ++i) xs[i] /= s[i % static_cast<size_t>(in)];
  const std::vector<float> xq = token_rounded(xs.data(), rows, in);
  double sum = 0.0;
  std::vector<float> ws, ref, got;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t out = outs[i];
    ws.assign(weights[i], weights[i] + out * in);
    if (!s.empty())
      for (size_t j = 0; j < ws.size(); ++j) ws[j] *= s[j % static_cast<size_t>(in)];
    const QuantizedLinear q = int8_channel_quantize(ws.data(), out, in);
    ref.resize(static_cast<size_t>(rows * out));
    got.resize(ref.size());
    linear(x, rows, weights[i], out, in, ref.data());
    linear(xq.data(), rows, q.dequantized.data(), out, in, got.data());
    for (size_t j = 0; j < ref.size(); ++j) {
      const double d = static_cast<double>(got[j]) - ref[j];
      sum += d * d;
    }
  }
  return sum / static_cast<double>(std::max<int64_t>(rows, 1));
}

}  // namespace llmk::quantize
