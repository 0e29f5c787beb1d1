// The verification sampler's statistical cases, shared by the CPU sampler's
// tests (tests/core/test_speculation.cpp, test_speculation_q.cpp) and the
// CUDA sampler's (tests/cudasim/test_sampling_speculation.cpp,
// test_sampling_draft_q.cpp): a 12-token row of logits,
// a history, the sampling cases, the drafts each case verifies, the float64
// target distribution and Pearson's chi-square against it.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/request.hpp"
#include "core/sampler.hpp"

namespace llmk::test {

// The target distribution of a sampled row, in double, from the raw
// logits: repetition penalty over `history`, temperature, top-k, top-p
// (shortest best-first run reaching top_p), min-p; as core/sampler.hpp
// specifies the steps.
inline std::vector<double> target_distribution(const std::vector<float>& raw, const SamplingParams& p,
                                        const std::vector<int32_t>& history) {
  const size_t n = raw.size();
  std::vector<double> z(raw.begin(), raw.end());
  for (size_t id = 0; id < n; ++id) {
    if (std::find(history.begin(), history.end(), int32_t(id)) == history.end()) continue;
    z[id] = z[id] > 0 ? z[id] / p.repetition_penalty : z[id] * p.repetition_penalty;
  }
  for (double& v : z) v /= p.temperature;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  const size_t k = p.top_k > 0 ? std::min<size_t>(size_t(p.top_k), n) : n;
  const double m = z[order[0]];
  double mass = 0;
  for (size_t i = 0; i < k; ++i) mass += std::exp(z[order[i]] - m);
  std::vector<double> prob(n, 0.0);
  double cumulative = 0, kept = 0;
  for (size_t i = 0; i < k; ++i) {
    const double w = std::exp(z[order[i]] - m);
    if (w < p.min_p) break;  // min-p: relative to the best token (weight 1)
    prob[order[i]] = w;
    kept += w;
    cumulative += w / mass;
    if (cumulative >= p.top_p) break;
  }
  for (double& v : prob) v /= kept;
  return prob;
}

// Pearson's statistic of `counts` against `expected` probabilities over
// `draws`, and the 0.999 quantile of chi-square with the categories' degrees
// of freedom (Wilson-Hilferty). Categories expecting under 5 draws merge.
inline std::pair<double, double> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected,
                                     int64_t draws) {
  double stat = 0, small_expected = 0, small_observed = 0;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * double(draws);
    if (e < 5) {
      small_expected += e;
      small_observed += double(counts[i]);
      continue;
    }
    stat += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++df;
  }
  if (small_expected >= 5) {
    stat += (small_observed - small_expected) * (small_observed - small_expected) / small_expected;
    ++df;
  }
  REQUIRE(df >= 1);  // a distribution over at least two categories
  const double z = 3.090232306;  // standard normal 0.999 quantile
  const double a = 2.0 / (9.0 * df);
  return {stat, df * std::pow(1 - a + z * std::sqrt(a), 3)};
}

// The cases: one row of raw logits over a 12-token vocabulary, the sample's
// history (the repetition penalty reads it), and four sets of parameters.
struct RejectionCase {
  const char* name;
  float temperature, top_p, min_p, repetition;
  int32_t top_k;

  SamplingParams params() const {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    p.repetition_penalty = repetition;
    return p;
  }
};
inline constexpr int32_t kRejectionVocab = 12;
inline constexpr int64_t kRejectionDraws = 100000;
inline constexpr RejectionCase kRejectionCases[] = {{"temperature 0.8", 0.8f, 1.0f, 0.0f, 1.0f, 0},
                                                    {"top-p 0.9", 1.0f, 0.9f, 0.0f, 1.0f, 0},
                                                    {"top-k 6, top-p 0.95", 1.3f, 0.95f, 0.0f, 1.0f, 6},
                                                    {"min-p 0.05, repetition penalty 1.3", 1.6f, 1.0f, 0.05f, 1.3f, 0}};

inline std::vector<float> rejection_logits() {
  std::mt19937 rng(3);
  std::normal_distribution<float> logit(0.0f, 0.7f);
  std::vector<float> raw(kRejectionVocab);
  for (float& v : raw) v = logit(rng);
  return raw;
}
inline std::vector<int32_t> rejection_history() { return {2, 5, 5}; }

// The drafts a case verifies: the likeliest token, an unlikely one inside
// the set, and (with truncation) one outside it, which is never accepted.
inline std::vector<int32_t> rejection_drafts(const std::vector<double>& target) {
  std::vector<int32_t> by_prob(target.size());
  for (size_t i = 0; i < target.size(); ++i) by_prob[i] = static_cast<int32_t>(i);
  std::sort(by_prob.begin(), by_prob.end(), [&](int32_t a, int32_t b) { return target[size_t(a)] > target[size_t(b)]; });
  return {by_prob[0], by_prob[3], by_prob.back()};
}

// Drafts drawn from a distribution (SamplerRow::draft_probs): target and
// draft pairs, each a row of logits under its own parameters. The draft's
// logits are the target's, or another row (`other_logits`), or the
// target's negated (`negated`: with top-k 3 on both, disjoint supports).
struct DraftPairCase {
  const char* name;
  RejectionCase target, draft;
  enum class Logits { same, other, negated } draft_logits;
};
inline constexpr DraftPairCase kDraftPairCases[] = {
    {"q equal to p", {"", 0.8f, 1.0f, 0.0f, 1.0f, 0}, {"", 0.8f, 1.0f, 0.0f, 1.0f, 0}, DraftPairCase::Logits::same},
    {"q wider than p", {"", 0.8f, 1.0f, 0.0f, 1.0f, 0}, {"", 1.7f, 1.0f, 0.0f, 1.0f, 0}, DraftPairCase::Logits::same},
    {"q narrower than p", {"", 1.2f, 1.0f, 0.0f, 1.0f, 0}, {"", 0.4f, 1.0f, 0.0f, 1.0f, 0},
     DraftPairCase::Logits::other},
    {"top-p p and q", {"", 1.0f, 0.9f, 0.0f, 1.0f, 0}, {"", 0.9f, 0.8f, 0.0f, 1.0f, 0}, DraftPairCase::Logits::other},
    {"top-k, top-p p against wide q", {"", 1.3f, 0.95f, 0.0f, 1.0f, 6}, {"", 1.5f, 1.0f, 0.0f, 1.0f, 0},
     DraftPairCase::Logits::other},
    {"penalised p and q", {"", 1.6f, 1.0f, 0.05f, 1.3f, 0}, {"", 1.1f, 0.95f, 0.0f, 1.8f, 0},
     DraftPairCase::Logits::other},
    {"disjoint supports", {"", 1.0f, 1.0f, 0.0f, 1.0f, 3}, {"", 1.0f, 1.0f, 0.0f, 1.0f, 3},
     DraftPairCase::Logits::negated},
};

inline std::vector<float> draft_pair_logits(const DraftPairCase& c) {
  std::vector<float> raw = rejection_logits();
  if (c.draft_logits == DraftPairCase::Logits::negated) {
    for (float& v : raw) v = -v;
  } else if (c.draft_logits == DraftPairCase::Logits::other) {
    std::mt19937 rng(11);
    std::normal_distribution<float> noise(0.0f, 0.8f);
    for (float& v : raw) v += noise(rng);
  }
  return raw;
}

// A distribution as the sampler takes a draft's q (SamplerRow::draft_probs):
// the tokens of positive probability, as id and probability.
inline std::vector<TokenProb> as_token_probs(const std::vector<double>& q) {
  std::vector<TokenProb> out;
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i] > 0) out.push_back({static_cast<int32_t>(i), static_cast<float>(q[i])});
  return out;
}

// The acceptance rate the rule must show: sum over x of min(p(x), q(x)).
inline double expected_acceptance(const std::vector<double>& p, const std::vector<double>& q) {
  double a = 0;
  for (size_t i = 0; i < p.size(); ++i) a += std::min(p[i], q[i]);
  return a;
}

}  // namespace llmk::test
