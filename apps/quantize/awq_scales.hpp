// AWQ's activation-aware scale search (Lin et al. 2023) for linear layers
// that share one input x: per input channel c a scale s[c] multiplies the
// weights' column c before rounding and divides x (folded into the op that
// produces x), so channels with large activations keep more precision:
//   s = x_mean^r / w_mean^(1 - r), normalized by sqrt(max s * min s),
// where x_mean[c] = mean |x[., c]| and w_mean[c] = mean over output rows of
// |w| / (its group's max |w|), for r on a grid of `grid` steps in [0, 1),
// and s = 1 (plain rounding) as one more candidate. The pick minimizes the
// layers' summed output error on x: sum ||x W^T - (x / s) Q(W diag(s))^T||^2,
// Q rounding to nearest in groups (group_quant.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "apps/quantize/group_quant.hpp"

namespace llmk::quantize {

struct AwqScales {
  std::vector<float> scales;  // [in]
  double ratio = -1.0;        // the grid point picked; -1 for plain rounding
  double error = 0.0;         // summed output error per row at the pick
  double rtn_error = 0.0;     // the same with s = 1
};

// weights: each [outs[i], in] row-major; x: [rows, in].
AwqScales awq_search(const float* x, int64_t rows, int64_t in, const std::vector<const float*>& weights,
                     const std::vector<int64_t>& outs, const QuantSpec& spec, int grid = 20);

}  // namespace llmk::quantize
