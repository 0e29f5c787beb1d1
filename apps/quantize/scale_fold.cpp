#include "apps/quantize/scale_fold.hpp"

#include <cstddef>

namespace llmk::quantize {

void scale_columns(const std::vector<float>& s, std::vector<float>& w, int64_t in) {
  for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % static_cast<size_t>(in)];
}

void fold_into_norm(const std::vector<float>& s, std::vector<float>& norm, const std::vector<std::vector<float>*>& weights,
                    int64_t in) {
  for (size_t c = 0; c < s.size(); ++c) norm[c] /= s[c];
  for (std::vector<float>* w : weights) scale_columns(s, *w, in);
}

void divide_rows(const std::vector<float>& s, std::vector<float>& w, std::vector<float>& bias, int64_t in) {
  for (size_t r = 0; r < s.size(); ++r) {
    for (int64_t c = 0; c < in; ++c) w[r * static_cast<size_t>(in) + static_cast<size_t>(c)] /= s[r];
    if (!bias.empty()) bias[r] /= s[r];
  }
}

std::vector<float> expand_kv_scales(const std::vector<float>& kv_scales, int64_t num_heads, int64_t num_kv_heads,
                                    int64_t head_dim) {
  const int64_t per_kv = num_heads / num_kv_heads;
  std::vector<float> s(static_cast<size_t>(num_heads * head_dim));
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < head_dim; ++i)
      s[static_cast<size_t>(h * head_dim + i)] = kv_scales[static_cast<size_t>((h / per_kv) * head_dim + i)];
  return s;
}

}  // namespace llmk::quantize
