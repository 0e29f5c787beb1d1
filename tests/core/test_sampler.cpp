// Sampler against a float64 reference that sorts the whole vocabulary, and
// its draws against the distribution they should follow (chi-square).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.hpp"
#include "core/sampler.hpp"
#include "core/sampler_math.hpp"

using llmk::SampledToken;
using llmk::Sampler;
using llmk::SamplerRow;
using llmk::SamplingParams;

namespace {

// ---- float64 reference ------------------------------------------------------

std::vector<double> ref_process(const std::vector<float>& logits, const SamplingParams& p,
                                const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  std::vector<double> z(logits.begin(), logits.end());
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  seen.insert(generated.begin(), generated.end());
  for (int32_t id : seen) z[id] = z[id] > 0 ? z[id] / p.repetition_penalty : z[id] * p.repetition_penalty;
  std::map<int32_t, int> counts;
  for (int32_t id : generated) ++counts[id];
  for (auto [id, count] : counts) {
    z[id] -= static_cast<double>(p.frequency_penalty) * count + static_cast<double>(p.presence_penalty);
  }
  if (p.temperature >= llmk::kGreedyTemperature) {
    for (auto& v : z) v /= p.temperature;
  }
  return z;
}

std::vector<int32_t> ref_sorted_ids(const std::vector<double>& z) {
  std::vector<int32_t> ids(z.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  return ids;
}

// Top-k, then top-p on the renormalised top-k set, then min-p; best first.
std::vector<int32_t> ref_candidates(const std::vector<double>& z, const SamplingParams& p) {
  std::vector<int32_t> ids = ref_sorted_ids(z);
  if (p.temperature < llmk::kGreedyTemperature) return {ids.front()};
  if (p.top_k > 0 && p.top_k < static_cast<int32_t>(ids.size())) ids.resize(p.top_k);
  const double m = z[ids.front()];
  if (p.top_p < 1.0f) {
    double total = 0;
    for (int32_t id : ids) total += std::exp(z[id] - m);
    double cumulative = 0;
    size_t keep = 0;
    while (keep < ids.size() && cumulative < p.top_p * total) cumulative += std::exp(z[ids[keep++]] - m);
    ids.resize(std::max<size_t>(keep, 1));
  }
  if (p.min_p > 0.0f) {
    std::erase_if(ids, [&](int32_t id) { return std::exp(z[id] - m) < p.min_p; });
  }
  return ids;
}

std::vector<double> ref_log_softmax(const std::vector<double>& z) {
  const double m = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double v : z) sum += std::exp(v - m);
  std::vector<double> out(z.size());
  for (size_t i = 0; i < z.size(); ++i) out[i] = z[i] - m - std::log(sum);
  return out;
}

// Upper tail of the chi-square distribution with `df` degrees of freedom:
// the regularised upper incomplete gamma Q(df/2, x/2), by its series below
// the mean and its continued fraction (modified Lentz) above it.
double chi_square_p_value(double x, int df) {
  const double a = df / 2.0, y = x / 2.0;
  if (y <= 0) return 1.0;
  const double log_prefactor = -y + a * std::log(y) - std::lgamma(a);
  if (y < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && term > sum * 1e-16; ++n) {
      term *= y / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  const double tiny = 1e-300;
  double b = y + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    if (std::abs(d * c - 1) < 1e-15) break;
  }
  return std::exp(log_prefactor) * h;
}

// Chi-square statistic of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t num_draws) {
  double stat = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(num_draws);
    stat += (observed[i] - expected) * (observed[i] - expected) / expected;
  }
  return stat;
}

std::vector<float> random_logits(std::mt19937& rng, int32_t vocab, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (auto& v : logits) v = normal(rng);
  return logits;
}

SamplerRow make_row(const std::vector<float>& logits, const SamplingParams& p, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& generated, uint64_t seed = 0, uint32_t index = 0) {
  SamplerRow row;
  row.logits = logits.data();
  row.params = &p;
  row.prompt_ids = prompt;
  row.generated_ids = generated;
  row.seed = seed;
  row.sample_index = index;
  return row;
}

const std::vector<int32_t> kNone;

// A chi-square test fails a correct sampler with this probability; the
// seeds are fixed, so the outcome is deterministic.
constexpr double kSignificance = 1e-3;

}  // namespace

TEST_CASE("The chi-square tail probability matches known quantiles", "[sampler]") {
  // Quantiles from standard tables.
  CHECK(chi_square_p_value(3.841, 1) == Approx(0.05).margin(1e-4));
  CHECK(chi_square_p_value(27.877, 9) == Approx(0.001).margin(1e-5));
  CHECK(chi_square_p_value(16.919, 9) == Approx(0.05).margin(1e-4));
  CHECK(chi_square_p_value(9.342, 10) == Approx(0.5).margin(1e-3));
  CHECK(chi_square_p_value(1e5, 9) < 1e-100);
}

TEST_CASE("The vectorisable exp is within 3e-7 relative of std::exp and 0 for -inf", "[sampler]") {
  double worst = 0;
  for (double x = -87.0; x <= 0.0; x += 0.000731) {
    const double expected = std::exp(static_cast<double>(static_cast<float>(x)));
    const double got = llmk::sampler_detail::exp_nonpositive(static_cast<float>(x));
    worst = std::max(worst, std::abs(got - expected) / expected);
  }
  CHECK(worst < 3e-7);
  CHECK(llmk::sampler_detail::exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(llmk::sampler_detail::exp_nonpositive(0.0f) == 1.0f);
}

TEST_CASE("Greedy sampling is the argmax, ties going to the lowest id", "[sampler]") {
  std::mt19937 rng(1);
  Sampler sampler(1000);
  SamplingParams p;
  p.temperature = 0.0f;
  for (int trial = 0; trial < 50; ++trial) {
    auto logits = random_logits(rng, 1000, 3.0f);
    const auto ids = ref_sorted_ids(ref_process(logits, p, {}, {}));
    CHECK(sampler.sample_one(make_row(logits, p, {}, {})).token_id == ids.front());
  }
  std::vector<float> tied(1000, -1.0f);
  tied[17] = tied[3] = tied[900] = 5.0f;
  CHECK(sampler.sample_one(make_row(tied, p, {}, {})).token_id == 3);
}

TEST_CASE("A row's argmax merged from parts cut anywhere, in any order, is the Sampler's greedy id, NaNs and "
          "infinities included", "[sampler]") {
  std::mt19937 rng(5);
  Sampler sampler(700);
  SamplingParams p;
  p.temperature = 0.0f;
  REQUIRE(llmk::chooses_raw_argmax(p));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> row = random_logits(rng, 700, 2.0f);
    // Ties, NaNs and infinities scattered; some rows all NaN, some all -inf.
    const int kind = trial % 8;
    for (int i = 0; i < 40; ++i) {
      const size_t at = rng() % row.size();
      if (kind == 1) row[at] = nan;
      if (kind == 2) row[at] = 9.0f;  // a tie for the maximum
      if (kind == 3) row[at] = -inf;
      if (kind == 4) row[at] = i % 2 ? nan : inf;
    }
    if (kind == 5) std::fill(row.begin(), row.end(), nan);
    if (kind == 6) std::fill(row.begin(), row.end(), -inf);
    if (kind == 7) {
      std::fill(row.begin(), row.end(), nan);
      row[rng() % row.size()] = -inf;
    }
    const int32_t expected = sampler.sample_one(make_row(row, p, {}, {})).token_id;
    CHECK(llmk::greedy_token(row.data(), 700) == expected);
    // 1-6 parts, cut at random places (some empty), merged in shuffled order.
    std::vector<int32_t> cuts = {0, 700};
    const int parts = 1 + static_cast<int>(rng() % 6);
    for (int c = 1; c < parts; ++c) cuts.push_back(static_cast<int32_t>(rng() % 701));
    std::sort(cuts.begin(), cuts.end());
    std::vector<llmk::ArgmaxPart> found;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) found.push_back(llmk::argmax_part(row.data(), cuts[c], cuts[c + 1]));
    std::shuffle(found.begin(), found.end(), rng);
    llmk::ArgmaxPart whole;
    for (const auto& part : found) whole = llmk::merge_argmax(whole, part);
    CAPTURE(trial, parts);
    CHECK(llmk::argmax_token(whole) == expected);
  }
  // Only greedy rows without penalties take the raw argmax.
  SamplingParams warm;
  CHECK_FALSE(llmk::chooses_raw_argmax(warm));
  for (auto set : {+[](SamplingParams& q) { q.repetition_penalty = 1.1f; },
                   +[](SamplingParams& q) { q.frequency_penalty = 0.5f; },
                   +[](SamplingParams& q) { q.presence_penalty = -0.5f; }}) {
    SamplingParams q = p;
    set(q);
    CHECK_FALSE(llmk::chooses_raw_argmax(q));
  }
  SamplingParams listed = p;  // logprobs do not change the choice
  listed.logprobs = 5;
  CHECK(llmk::chooses_raw_argmax(listed));
}

TEST_CASE("Top-k, top-p and min-p keep exactly the reference candidate set", "[sampler]") {
  std::mt19937 rng(2);
  for (int32_t vocab : {50, 1000, 32000}) {
    Sampler sampler(vocab);
    for (int trial = 0; trial < 40; ++trial) {
      SamplingParams p;
      p.temperature = std::vector<float>{0.3f, 0.7f, 1.0f, 1.6f}[trial % 4];
      p.top_k = std::vector<int32_t>{0, 1, 5, 40, 300, 2000}[rng() % 6];
      p.top_p = std::vector<float>{1.0f, 0.95f, 0.8f, 0.5f, 0.1f}[rng() % 5];
      p.min_p = std::vector<float>{0.0f, 0.0f, 0.05f, 0.3f}[rng() % 4];
      if (trial % 3 == 0) {
        p.repetition_penalty = 1.3f;
        p.frequency_penalty = 0.4f;
        p.presence_penalty = 0.2f;
      }
      const auto logits = random_logits(rng, vocab, 2.5f);
      std::vector<int32_t> prompt, generated;
      for (int i = 0; i < 30; ++i) prompt.push_back(rng() % vocab), generated.push_back(rng() % vocab);
      const auto z = ref_process(logits, p, prompt, generated);
      const auto expected = ref_candidates(z, p);
      INFO("vocab " << vocab << " T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " min_p "
                    << p.min_p);
      const auto got = sampler.candidates(make_row(logits, p, prompt, generated));
      if (p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f) {
        REQUIRE(got == expected);
      } else {
        // No truncation: every token whose weight is representable in float.
        const double m = *std::max_element(z.begin(), z.end());
        REQUIRE(got.size() == static_cast<size_t>(std::count_if(z.begin(), z.end(), [&](double v) { return v - m > -87.0; })));
      }
    }
  }
}

TEST_CASE("Top-p reaches into a long tail far below the best token", "[sampler]") {
  // One token at 0 and 31999 at -10: the tail holds 59% of the mass, so the
  // selection has to look well beyond the first margin.
  std::vector<float> logits(32000, -10.0f);
  logits[123] = 0.0f;
  logits[7] = -9.0f;
  Sampler sampler(32000);
  SamplingParams p;
  p.top_p = 0.9f;
  const auto expected = ref_candidates(ref_process(logits, p, {}, {}), p);
  CHECK(expected.size() > 20000);
  CHECK(sampler.candidates(make_row(logits, p, {}, {})) == expected);
}

TEST_CASE("Top-p keeps the reference set over wide, tied and peaked logits", "[sampler]") {
  // The threshold search estimates masses in f32 and narrows the margin
  // while the set is large: logits on a grid of quarters (thousands of ties
  // at any threshold), a flat spread (a nucleus of thousands), and a peaked
  // head over a long tail, at several top_p, against the float64 reference.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int32_t vocab = 20000;
  Sampler sampler(vocab);
  for (int shape = 0; shape < 3; ++shape) {
    std::vector<float> logits(vocab);
    for (auto& v : logits) v = normal(rng);
    if (shape == 0)
      for (auto& v : logits) v = std::floor(v * 4.0f) / 4.0f;
    if (shape == 2)
      for (int i = 0; i < 16; ++i) logits[rng() % vocab] = 14.0f + normal(rng) / 3.0f;
    for (const float top_p : {0.99f, 0.9f, 0.5f, 0.2f}) {
      SamplingParams p;
      p.top_p = top_p;
      INFO("shape " << shape << " top_p " << top_p);
      CHECK(sampler.candidates(make_row(logits, p, {}, {})) == ref_candidates(ref_process(logits, p, {}, {}), p));
    }
  }
}

TEST_CASE("Penalties equal the float64 reference formula", "[sampler]") {
  std::mt19937 rng(3);
  const int32_t vocab = 500;
  Sampler sampler(vocab);
  for (int trial = 0; trial < 30; ++trial) {
    SamplingParams p;
    p.repetition_penalty = std::vector<float>{1.0f, 1.2f, 0.8f, 2.0f}[trial % 4];
    p.frequency_penalty = std::vector<float>{0.0f, 0.5f, -0.3f}[trial % 3];
    p.presence_penalty = std::vector<float>{0.0f, 1.1f, -0.7f, 0.2f, 2.0f}[trial % 5];
    p.temperature = std::vector<float>{1.0f, 0.5f, 0.0f}[rng() % 3];
    const auto logits = random_logits(rng, vocab, 4.0f);
    std::vector<int32_t> prompt, generated;
    // Repeats within and across prompt and generated tokens.
    for (int i = 0; i < 80; ++i) prompt.push_back(rng() % 60);
    for (int i = 0; i < 80; ++i) generated.push_back(40 + rng() % 60);
    const auto expected = ref_process(logits, p, prompt, generated);
    std::vector<float> got(vocab);
    sampler.processed_logits(make_row(logits, p, prompt, generated), got);
    for (int32_t i = 0; i < vocab; ++i) {
      INFO("token " << i << " trial " << trial);
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-6));
    }
    // The scratch counters are left clean: the same call without history
    // gives the unpenalised logits.
    sampler.processed_logits(make_row(logits, p, {}, {}), got);
    const auto plain = ref_process(logits, p, {}, {});
    for (int32_t i = 0; i < vocab; ++i) REQUIRE(got[i] == Approx(plain[i]).epsilon(1e-6).margin(1e-6));
  }
}

TEST_CASE("Temperature sampling frequencies match the softmax probabilities (chi-square)", "[sampler]") {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -0.5f, 1.5f, 0.2f};
  const int32_t vocab = static_cast<int32_t>(logits.size());
  Sampler sampler(vocab);
  for (float temperature : {1.0f, 0.7f, 1.8f}) {
    SamplingParams p;
    p.temperature = temperature;
    const auto z = ref_process(logits, p, {}, {});
    std::vector<double> probs(vocab);
    const auto logp = ref_log_softmax(z);
    for (int32_t i = 0; i < vocab; ++i) probs[i] = std::exp(logp[i]);
    // Steps of one sequence, then sample indices of one step: both must be
    // draws from the distribution.
    const int64_t num_draws = 40000;
    std::vector<int32_t> history(num_draws, 0);
    std::vector<int64_t> by_step(vocab, 0), by_index(vocab, 0);
    for (int64_t d = 0; d < num_draws; ++d) {
      SamplerRow row = make_row(logits, p, {}, {}, 20240601);
      row.generated_ids = std::span<const int32_t>(history.data(), d);
      ++by_step[sampler.sample_one(row).token_id];
      row.generated_ids = {};
      row.sample_index = static_cast<uint32_t>(d);
      ++by_index[sampler.sample_one(row).token_id];
    }
    INFO("temperature " << temperature);
    CHECK(chi_square_p_value(chi_square(by_step, probs, num_draws), vocab - 1) > kSignificance);
    CHECK(chi_square_p_value(chi_square(by_index, probs, num_draws), vocab - 1) > kSignificance);
  }
}

TEST_CASE("Truncated sampling draws only candidates, with renormalised frequencies", "[sampler]") {
  std::mt19937 rng(5);
  const int32_t vocab = 300;
  const auto logits = random_logits(rng, vocab, 1.5f);
  Sampler sampler(vocab);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 12;
  p.top_p = 0.85f;
  p.min_p = 0.02f;
  const auto z = ref_process(logits, p, {}, {});
  const auto kept = ref_candidates(z, p);
  REQUIRE(kept.size() >= 3);
  std::vector<double> probs;
  double total = 0;
  for (int32_t id : kept) total += std::exp(z[id] - z[kept[0]]);
  for (int32_t id : kept) probs.push_back(std::exp(z[id] - z[kept[0]]) / total);
  const int64_t num_draws = 30000;
  std::vector<int64_t> observed(kept.size(), 0);
  for (int64_t d = 0; d < num_draws; ++d) {
    SamplerRow row = make_row(logits, p, {}, {}, static_cast<uint64_t>(d) * 7919u);
    const int32_t token = sampler.sample_one(row).token_id;
    const auto it = std::find(kept.begin(), kept.end(), token);
    REQUIRE(it != kept.end());
    ++observed[it - kept.begin()];
  }
  CHECK(chi_square_p_value(chi_square(observed, probs, num_draws), static_cast<int>(kept.size()) - 1) >
        kSignificance);
}

TEST_CASE("A seeded sequence samples the same tokens whatever else is in the batch", "[sampler]") {
  std::mt19937 rng(6);
  const int32_t vocab = 32000;
  const auto logits = random_logits(rng, vocab, 1.0f);  // flat enough to make draws vary
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.seed = 42;
  SamplingParams other;
  other.temperature = 1.2f;
  other.top_k = 50;
  other.repetition_penalty = 1.1f;
  std::vector<std::vector<float>> other_logits;
  for (int i = 0; i < 63; ++i) other_logits.push_back(random_logits(rng, vocab, 2.0f));

  auto run = [&](bool crowded, uint32_t sample_index) {
    Sampler sampler(vocab, 4);
    std::vector<int32_t> generated;
    std::vector<SampledToken> out(64);
    for (int step = 0; step < 40; ++step) {
      std::vector<SamplerRow> rows;
      if (crowded) {
        for (int i = 0; i < 31; ++i) rows.push_back(make_row(other_logits[i], other, kNone, kNone, rng(), 0));
      }
      rows.push_back(make_row(logits, p, kNone, generated, llmk::resolve_seed(p.seed), sample_index));
      if (crowded) {
        for (int i = 31; i < 63; ++i) rows.push_back(make_row(other_logits[i], other, kNone, kNone, rng(), 0));
      }
      sampler.sample(rows, out);
      generated.push_back(out[crowded ? 31 : 0].token_id);
    }
    return generated;
  };
  const auto alone = run(false, 0);
  CHECK(run(true, 0) == alone);
  CHECK(run(true, 1) != alone);  // another sample index is another stream
  CHECK(llmk::resolve_seed(std::nullopt) != llmk::resolve_seed(std::nullopt));
}

TEST_CASE("Logprobs equal the float64 log-softmax of the processed logits", "[sampler]") {
  std::mt19937 rng(8);
  const int32_t vocab = 32000;
  Sampler sampler(vocab);
  for (int trial = 0; trial < 12; ++trial) {
    SamplingParams p;
    p.temperature = std::vector<float>{0.0f, 1.0f, 0.6f, 1.5f}[trial % 4];
    p.top_k = trial % 3 == 0 ? 20 : 0;
    p.top_p = trial % 2 == 0 ? 0.9f : 1.0f;
    p.repetition_penalty = trial % 5 == 0 ? 1.3f : 1.0f;
    p.frequency_penalty = trial % 6 == 0 ? 0.5f : 0.0f;
    p.logprobs = std::vector<int32_t>{0, 1, 5, 20}[trial % 4];
    const auto logits = random_logits(rng, vocab, 4.0f);
    std::vector<int32_t> prompt = {5, 9, 11, 5}, generated = {9, 9, 300};
    const auto result = sampler.sample_one(make_row(logits, p, prompt, generated, trial));
    REQUIRE(result.has_logprobs);
    SamplingParams logprob_params = p;
    if (logprob_params.temperature < llmk::kGreedyTemperature) logprob_params.temperature = 1.0f;
    const auto z = ref_process(logits, logprob_params, prompt, generated);
    const auto logp = ref_log_softmax(z);
    const auto order = ref_sorted_ids(z);
    INFO("trial " << trial);
    CHECK(result.logprobs.token_id == result.token_id);
    CHECK(std::abs(result.logprobs.logprob - logp[result.token_id]) < 1e-5);
    REQUIRE(result.logprobs.top.size() == static_cast<size_t>(p.logprobs));
    for (int32_t i = 0; i < p.logprobs; ++i) {
      CHECK(result.logprobs.top[i].first == order[i]);
      CHECK(std::abs(result.logprobs.top[i].second - logp[order[i]]) < 1e-5);
    }
  }
  SamplingParams none;
  CHECK_FALSE(sampler.sample_one(make_row(random_logits(rng, vocab, 1.0f), none, {}, {})).has_logprobs);
}

TEST_CASE("Out-of-range sampling parameters are rejected naming the field", "[sampler]") {
  // The field the error names, "" when the parameters pass.
  auto field_for = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    try {
      llmk::validate_sampling_params(p);
    } catch (const llmk::FieldError& e) {
      CHECK(e.code() == llmk::ErrorCode::invalid_argument);
      CHECK_THAT(std::string(e.what()), Catch::StartsWith("'" + e.field() + "' "));
      return e.field();
    }
    return std::string();
  };
  namespace limits = llmk::sampling_limits;
  CHECK(field_for([](SamplingParams&) {}).empty());
  CHECK(field_for([](SamplingParams& p) { p.temperature = limits::max_temperature; }).empty());
  CHECK(field_for([](SamplingParams& p) { p.n = limits::max_samples; }).empty());
  CHECK(field_for([](SamplingParams& p) { p.repetition_penalty = limits::min_repetition_penalty; }).empty());
  CHECK(field_for([](SamplingParams& p) { p.top_k = -1; }).empty());
  CHECK(field_for([](SamplingParams& p) { p.temperature = -0.1f; }) == "temperature");
  CHECK(field_for([](SamplingParams& p) { p.temperature = 100.5f; }) == "temperature");
  CHECK(field_for([](SamplingParams& p) { p.temperature = std::nanf(""); }) == "temperature");
  CHECK(field_for([](SamplingParams& p) { p.top_p = 0.0f; }) == "top_p");
  CHECK(field_for([](SamplingParams& p) { p.top_k = -2; }) == "top_k");
  CHECK(field_for([](SamplingParams& p) { p.min_p = 1.5f; }) == "min_p");
  CHECK(field_for([](SamplingParams& p) { p.repetition_penalty = 0.0f; }) == "repetition_penalty");
  CHECK(field_for([](SamplingParams& p) { p.repetition_penalty = 101.0f; }) == "repetition_penalty");
  CHECK(field_for([](SamplingParams& p) { p.presence_penalty = 2.5f; }) == "presence_penalty");
  CHECK(field_for([](SamplingParams& p) { p.frequency_penalty = -3.0f; }) == "frequency_penalty");
  CHECK(field_for([](SamplingParams& p) { p.logprobs = 21; }) == "logprobs");
  CHECK(field_for([](SamplingParams& p) { p.n = 0; }) == "n");
  CHECK(field_for([](SamplingParams& p) { p.n = limits::max_samples + 1; }) == "n");
  CHECK(field_for([](SamplingParams& p) { p.max_tokens = 0; }) == "max_tokens");
  CHECK(field_for([](SamplingParams& p) { p.stop = {"a", ""}; }) == "stop");
  CHECK(field_for([](SamplingParams& p) { p.stop.assign(limits::max_stop_strings + 1, "x"); }) == "stop");
}
