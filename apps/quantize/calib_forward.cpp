#include "apps/quantize/calib_forward.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/rope_scaling.hpp"

namespace llmk::quantize {
namespace {

std::vector<float> f32_of(const Checkpoint& c, const std::string& name) {
  const TensorView& t = c.tensor(name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace

LayerFloats read_layer(const Checkpoint& c, int32_t layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  LayerFloats l;
  l.input_norm = f32_of(c, p + "input_layernorm.weight");
  l.post_norm = f32_of(c, p + "post_attention_layernorm.weight");
  l.q = f32_of(c, p + "self_attn.q_proj.weight");
  l.k = f32_of(c, p + "self_attn.k_proj.weight");
  l.v = f32_of(c, p + "self_attn.v_proj.weight");
  l.o = f32_of(c, p + "self_attn.o_proj.weight");
  l.gate = f32_of(c, p + "mlp.gate_proj.weight");
  l.up = f32_of(c, p + "mlp.up_proj.weight");
  l.down = f32_of(c, p + "mlp.down_proj.weight");
  if (c.config().attention_bias) {
    l.q_bias = f32_of(c, p + "self_attn.q_proj.bias");
    l.k_bias = f32_of(c, p + "self_attn.k_proj.bias");
    l.v_bias = f32_of(c, p + "self_attn.v_proj.bias");
  }
  return l;
}

void linear(const float* x, int64_t rows, const float* w, int64_t out, int64_t in, float* y,
            const std::vector<float>& bias) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out),
              static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f, y,
              static_cast<int>(out));
  if (!bias.empty())
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += bias[static_cast<size_t>(o)];
}

CalibForward::CalibForward(const ModelConfig& config, int64_t num_samples, int64_t seq_len)
    : config_(config), num_samples_(num_samples), seq_len_(seq_len) {
  const std::vector<double> inv_freq = rope_inv_freq(config);
  const int64_t half = config.head_dim / 2;
  cos_.resize(static_cast<size_t>(seq_len * half));
  sin_.resize(cos_.size());
  for (int64_t t = 0; t < seq_len; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) * inv_freq[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(a));
      sin_[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(a));
    }
}

void CalibForward::rms_norm(const float* x, const std::vector<float>& w, float* out) const {
  const int64_t dim = config_.hidden_size;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows(); ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + config_.rms_norm_eps));
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = x[r * dim + i] * inv * w[static_cast<size_t>(i)];
  }
}

void CalibForward::attention(const float* q_in, const float* k_in, const float* v, float* out) const {
  const int64_t hd = config_.head_dim, half = hd / 2, heads = config_.num_heads, kv_heads = config_.num_kv_heads;
  const int64_t q_dim = heads * hd, kv_dim = kv_heads * hd, per_kv = heads / kv_heads;
  std::vector<float> q(q_in, q_in + rows() * q_dim), k(k_in, k_in + rows() * kv_dim);
  auto rotate = [&](float* row, int64_t num_heads, int64_t pos) {
    for (int64_t h = 0; h < num_heads; ++h) {
      float* x = row + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos_[static_cast<size_t>(pos * half + i)], s = sin_[static_cast<size_t>(pos * half + i)];
        const float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
      }
    }
  };
  for (int64_t r = 0; r < rows(); ++r) {
    rotate(q.data() + r * q_dim, heads, r % seq_len_);
    rotate(k.data() + r * kv_dim, kv_heads, r % seq_len_);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t s = 0; s < num_samples_; ++s)
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> score(static_cast<size_t>(seq_len_));
      const int64_t kh = h / per_kv, base = s * seq_len_;
      for (int64_t t = 0; t < seq_len_; ++t) {
        const float* qr = q.data() + (base + t) * q_dim + h * hd;
        float mx = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const float* kr = k.data() + (base + u) * kv_dim + kh * hd;
          float dot = 0.0f;
          for (int64_t i = 0; i < hd; ++i) dot += qr[i] * kr[i];
          score[static_cast<size_t>(u)] = dot * scale;
          mx = std::max(mx, score[static_cast<size_t>(u)]);
        }
        double sum = 0.0;
        for (int64_t u = 0; u <= t; ++u) {
          score[static_cast<size_t>(u)] = std::exp(score[static_cast<size_t>(u)] - mx);
          sum += score[static_cast<size_t>(u)];
        }
        float* o = out + (base + t) * q_dim + h * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t u = 0; u <= t; ++u) {
          const float p = static_cast<float>(score[static_cast<size_t>(u)] / sum);
          const float* vr = v + (base + u) * kv_dim + kh * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] += p * vr[i];
        }
      }
    }
}

void CalibForward::silu_mul(const float* gate, const float* up, float* out) const {
  const int64_t n = rows() * config_.intermediate_size;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace llmk::quantize
