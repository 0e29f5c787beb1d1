// The sampler's rule for a draft drawn from a distribution (internal to
// core/sampler.cpp; SamplerRow::draft_probs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/sampler.hpp"
#include "core/sampler_math.hpp"

namespace llmk::sampler_detail {

// The token a sampled row emits for draft x drawn from q: x with
// probability min(1, p(x)/q(x)), else a draw from the normalised
// max(0, p - q), which never returns x. p is cand's weights, normalised
// (the row's step-7 candidates, any order). u: the row's uniform number.
// q_dense: [vocab] zeros, used as scratch and left zero.
int32_t verify_against_q(std::span<const Weighted> cand, int32_t x, std::span<const TokenProb> q, double u,
                         std::vector<float>& q_dense);

}  // namespace llmk::sampler_detail
