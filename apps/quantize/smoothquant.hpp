// SmoothQuant (Xiao et al. 2023) for W8A8. A few input channels of a
// linear layer carry activations far larger than the rest, so rounding a
// token's activations to int8 with one scale leaves the small channels few
// levels. Per input channel j of the layers that share an input X,
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)
// (max over the calibration rows, and over every output row of the group's
// weights) migrates the difficulty: X / s, folded into the op producing X
// (scale_fold.hpp), has flatter channels and W diag(s) larger columns; at
// alpha 0.5 both end with the same range per channel, sqrt(max|X_j| max|W_j|).
// The weights are then rounded as linear.int8 rounds them (per output
// channel, symmetric, 127 levels), the activations per token at serve time.
#pragma once

#include <cstdint>
#include <vector>

#include "apps/quantize/group_quant.hpp"

namespace llmk::quantize {

// [in]: max over rows of |x[., c]|, x [rows, in].
std::vector<float> channel_abs_max(const float* x, int64_t rows, int64_t in);

// [in]: max over every row of every weight ([outs[i], in]) of |w[., c]|.
std::vector<float> column_abs_max(const std::vector<const float*>& weights, const std::vector<int64_t>& outs,
                                  int64_t in);

// [num_kv_heads * head_dim] from [num_heads * head_dim]: the max over the query heads that share a KV head.
std::vector<float> max_over_shared_heads(const std::vector<float>& v, int64_t num_heads, int64_t num_kv_heads,
                                         int64_t head_dim);

// s_j = act_max_j^alpha / weight_max_j^(1 - alpha); 1 where either max is 0 (nothing to migrate).
std::vector<float> smooth_scales(const std::vector<float>& act_max, const std::vector<float>& weight_max, double alpha);

// linear.int8's weight rounding: per output row scale = max|w| / 127 (f32), q = round(w * 127 / max|w|)
// in [-127, 127], held as 8-bit integer groups of one group per row with zero point 128.
QuantizedLinear int8_channel_quantize(const float* w, int64_t out, int64_t in);

// The layers' output error as W8A8 serves them, against float, per row:
//   sum_i ||x W_i^T - T(x / s) C(W_i diag(s))^T||^2 / rows,
// C rounding weights as above, T activations per row (symmetric, 127 levels); s empty: no smoothing.
double w8a8_error(const float* x, int64_t rows, int64_t in, const std::vector<const float*>& weights,
                  const std::vector<int64_t>& outs, const std::vector<float>& s);

}  // namespace llmk::quantize
