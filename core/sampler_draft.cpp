// The modified rejection rule against a draft's full distribution q
// (SamplerRow::draft_probs), and the draft model's own draws.
#include "core/sampler_draft.hpp"

#include "core/sampler.hpp"

namespace llmk {

double draft_uniform(uint64_t seed, uint32_t sample_index, uint64_t step) {
  // Another seed for the same counter-based hash: drafts never reuse the
  // numbers the target's rows verify them with.
  return sampler_uniform(seed ^ 0xD1B54A32D192ED03ull, sample_index, step);
}

int32_t draw_from(std::span<const TokenProb> dist, double u) {
  double total = 0.0;
  for (const TokenProb& t : dist) total += t.prob;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last = dist.empty() ? 0 : dist.front().id;
  for (const TokenProb& t : dist) {
    if (t.prob <= 0.0f) continue;
    last = t.id;
    cumulative += t.prob;
    if (cumulative > target) return t.id;
  }
  return last;
}

namespace sampler_detail {

int32_t verify_against_q(std::span<const Weighted> cand, int32_t x, std::span<const TokenProb> q, double u,
                         std::vector<float>& q_dense) {
  double mass = 0.0, wx = 0.0;
  for (const Weighted& c : cand) {
    mass += c.weight;
    if (c.id == x) wx = c.weight;
  }
  for (const TokenProb& t : q) q_dense[static_cast<size_t>(t.id)] = t.prob;
  const double px = mass > 0.0 ? wx / mass : 0.0;
  const double qx = x >= 0 ? q_dense[static_cast<size_t>(x)] : 0.0;
  int32_t id = x;
  if (!(u * qx < px)) {
    // Rejected (only possible where p(x) < q(x), so the residual is 0 at
    // x): u is uniform on [a, 1) with a = p(x)/q(x); rescaled, it draws
    // from max(0, p - q) over p's support.
    const double a = qx > 0.0 ? px / qx : 0.0;
    const double v = (u - a) / (1.0 - a);
    double residual = 0.0;
    for (const Weighted& c : cand) residual += std::max(0.0, c.weight / mass - q_dense[static_cast<size_t>(c.id)]);
    const bool from_residual = residual > 0.0;
    // With no residual left (p equal to q but for rounding), p without x.
    const double total = from_residual ? residual : mass - wx;
    const double target = v * total;
    double cumulative = 0.0;
    int32_t last = -1;
    for (const Weighted& c : cand) {
      if (c.id == x) continue;
      const double r = from_residual ? std::max(0.0, c.weight / mass - q_dense[static_cast<size_t>(c.id)]) : c.weight;
      if (r <= 0.0) continue;
      last = c.id;
      cumulative += r;
      if (cumulative > target) break;
    }
    if (last >= 0) id = last;  // none: p holds x alone, which is then accepted
  }
  for (const TokenProb& t : q) q_dense[static_cast<size_t>(t.id)] = 0.0f;
  return id;
}

}  // namespace sampler_detail
}  // namespace llmk
