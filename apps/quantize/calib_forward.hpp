// The float Llama forward `llmk quantize` runs over its calibration samples,
// one layer at a time, to collect each linear layer's inputs: rows are
// num_samples independent sequences of seq_len tokens, laid end to end
// ([num_samples * seq_len, width] row-major). HF semantics as the engine's
// CPU forward (core/model.cpp): RMSNorm, rotate-half RoPE with the model's
// frequencies (core/rope_scaling.hpp), causal GQA attention, SiLU-gated MLP.
#pragma once

#include <cstdint>
#include <vector>

#include "core/checkpoint.hpp"

namespace llmk::quantize {

// One decoder layer's weights as f32 copies ([out, in] row-major), which the
// quantizer rescales (AWQ) and replaces by their dequantized values.
struct LayerFloats {
  std::vector<float> input_norm, post_norm;
  std::vector<float> q, k, v, o, gate, up, down;
  std::vector<float> q_bias, k_bias, v_bias;  // empty unless config.attention_bias
};

LayerFloats read_layer(const Checkpoint& checkpoint, int32_t layer);

// y [rows, out] = x [rows, in] w^T (+ bias when not empty).
void linear(const float* x, int64_t rows, const float* w, int64_t out, int64_t in, float* y,
            const std::vector<float>& bias = {});

class CalibForward {
 public:
  CalibForward(const ModelConfig& config, int64_t num_samples, int64_t seq_len);
  int64_t rows() const { return num_samples_ * seq_len_; }
  // out = RMSNorm(x) * w, rows of hidden_size.
  void rms_norm(const float* x, const std::vector<float>& w, float* out) const;
  // out [rows, q_dim] = causal attention of q [rows, q_dim], k, v [rows, kv_dim] (RoPE applied here).
  void attention(const float* q, const float* k, const float* v, float* out) const;
  // out = silu(gate) * up, [rows, intermediate].
  void silu_mul(const float* gate, const float* up, float* out) const;

 private:
  ModelConfig config_;
  int64_t num_samples_, seq_len_;
  std::vector<float> cos_, sin_;  // [seq_len, head_dim / 2]
};

}  // namespace llmk::quantize
