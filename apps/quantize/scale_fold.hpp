// Per-input-channel scales folded into a model's float weights, exact in
// exact arithmetic: a linear layer's input column c is multiplied by s[c]
// and the op producing that input is divided by it (an RMSNorm's weight, or
// the output rows of the projection before it), so the model computes the
// same function. AWQ and SmoothQuant fold their scales this way.
#pragma once

#include <cstdint>
#include <vector>

namespace llmk::quantize {

// w [out, in]: w[., c] *= s[c].
void scale_columns(const std::vector<float>& s, std::vector<float>& w, int64_t in);

// norm[c] /= s[c]; then each weight in `weights` ([., in]) has its columns scaled by s.
void fold_into_norm(const std::vector<float>& s, std::vector<float>& norm, const std::vector<std::vector<float>*>& weights,
                    int64_t in);

// The producing projection's output rows (w [s.size(), in]) and its bias (when not empty) divided by s.
void divide_rows(const std::vector<float>& s, std::vector<float>& w, std::vector<float>& bias, int64_t in);

// o_proj's input column h * head_dim + i reads v_proj's output row kh * head_dim + i, kh the KV head of
// query head h: a scale per v row [num_kv_heads * head_dim] as one per o_proj column [num_heads * head_dim].
std::vector<float> expand_kv_scales(const std::vector<float>& kv_scales, int64_t num_heads, int64_t num_kv_heads,
                                    int64_t head_dim);

}  // namespace llmk::quantize
