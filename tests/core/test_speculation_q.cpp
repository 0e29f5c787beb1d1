// Sampled drafting (speculative.draft_sampling sampled): drafts drawn from
// the draft's own distribution q and verified by min(1, p/q) with the
// residual max(0, p - q), checked statistically against float64 p and q.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/sampler.hpp"
#include "support/speculation_cases.hpp"

using namespace llmk;
using namespace llmk::test;

TEST_CASE("Sampler::distribution is the processed distribution a draft is drawn from", "[speculation][sampler]") {
  const std::vector<int32_t> history = rejection_history();
  Sampler sampler(kRejectionVocab, 1);
  for (const DraftPairCase& c : kDraftPairCases) {
    for (const RejectionCase& rc : {c.target, c.draft}) {
      const std::vector<float> raw = &rc == &c.target ? rejection_logits() : draft_pair_logits(c);
      const SamplingParams p = rc.params();
      const std::vector<double> ref = target_distribution(raw, p, history);
      SamplerRow row;
      row.logits = raw.data();
      row.params = &p;
      row.generated_ids = history;
      std::vector<TokenProb> dist;
      sampler.distribution(row, dist);
      std::vector<double> got(kRejectionVocab, 0.0);
      for (const TokenProb& t : dist) got[size_t(t.id)] += t.prob;
      INFO(c.name);
      for (int32_t i = 0; i < kRejectionVocab; ++i) CHECK(got[size_t(i)] == Approx(ref[size_t(i)]).margin(1e-6));
    }
  }
  // Greedy: the argmax with certainty.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<float> raw = rejection_logits();
  SamplerRow row;
  row.logits = raw.data();
  row.params = &greedy;
  std::vector<TokenProb> dist;
  sampler.distribution(row, dist);
  REQUIRE(dist.size() == 1);
  CHECK(dist[0].id == greedy_token(raw.data(), kRejectionVocab));
  CHECK(dist[0].prob == 1.0f);
}

TEST_CASE("drafts drawn from q and verified by min(1, p/q) give the target distribution p",
          "[speculation][sampler]") {
  const std::vector<int32_t> history = rejection_history();
  const std::vector<int32_t> prompt;
  const std::vector<float> raw = rejection_logits();
  Sampler sampler(kRejectionVocab, 1);
  const int64_t draws = kRejectionDraws;
  for (const DraftPairCase& c : kDraftPairCases) {
    const SamplingParams pt = c.target.params(), pd = c.draft.params();
    const std::vector<float> draft_raw = draft_pair_logits(c);
    const std::vector<double> p = target_distribution(raw, pt, history);
    const std::vector<double> q = target_distribution(draft_raw, pd, history);
    const std::vector<TokenProb> q_row = as_token_probs(q);
    const double acceptance = expected_acceptance(p, q);
    INFO(c.name << ": expected acceptance " << acceptance);
    std::vector<int64_t> counts(kRejectionVocab, 0), draft_counts(kRejectionVocab, 0);
    int64_t accepted = 0;
    SamplerRow row;
    row.logits = raw.data();
    row.params = &pt;
    row.prompt_ids = prompt;
    row.generated_ids = history;
    row.draft_probs = q_row;
    for (int64_t d = 0; d < draws; ++d) {
      row.seed = uint64_t(d) * 7919u + 1;
      // The draft's own stream at the same generated index as the row.
      row.draft_token = draw_from(q_row, draft_uniform(row.seed, 0, history.size()));
      ++draft_counts[size_t(row.draft_token)];
      const int32_t t = sampler.sample_one(row).token_id;
      REQUIRE((t >= 0 && t < kRejectionVocab));
      ++counts[size_t(t)];
      accepted += t == row.draft_token;
    }
    const auto [draft_stat, draft_critical] = chi_square(draft_counts, q, draws);
    CHECK(draft_stat < draft_critical);  // the drafts follow q
    const auto [stat, critical] = chi_square(counts, p, draws);
    CHECK(stat < critical);  // the emitted tokens follow p
    if (getenv("LLMK_PRINT_CHI2"))
      std::printf("%s: chi-square %.1f < %.1f, acceptance %.4f (expected %.4f)\n", c.name, stat, critical,
                  double(accepted) / double(draws), acceptance);
    // A row emits its draft exactly when it accepts it: the rate is
    // sum min(p, q), within 4.5 standard deviations.
    const double sd = std::sqrt(std::max(0.0, acceptance * (1 - acceptance)) / double(draws));
    CHECK(std::abs(double(accepted) / double(draws) - acceptance) <= 4.5 * sd + 1e-9);
  }
}

TEST_CASE("a draft the target cannot emit is always rejected, and a rejected row never emits it",
          "[speculation][sampler]") {
  // p truncated to its top 3 (top-k), q on every token: a draft outside p's
  // set has p = 0, so the row redraws from max(0, p - q) within the set.
  const std::vector<float> raw = rejection_logits();
  SamplingParams pt;
  pt.temperature = 1.0f;
  pt.top_k = 3;
  const std::vector<int32_t> none;
  const std::vector<double> p = target_distribution(raw, pt, none);
  std::vector<double> q(kRejectionVocab, 1.0 / kRejectionVocab);
  const std::vector<TokenProb> q_row = as_token_probs(q);
  Sampler sampler(kRejectionVocab, 1);
  SamplerRow row;
  row.logits = raw.data();
  row.params = &pt;
  row.draft_probs = q_row;
  for (int32_t x = 0; x < kRejectionVocab; ++x) {
    row.draft_token = x;
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      row.seed = seed;
      const int32_t t = sampler.sample_one(row).token_id;
      CHECK(p[size_t(t)] > 0);
      if (p[size_t(x)] == 0) CHECK(t != x);
    }
  }
}
