// The CUDA sampler's rows verifying drafts drawn from a distribution q
// (SamplingRowParams::draft_q_row, speculative.draft_sampling sampled) under
// the simulation: for every pair of tests/support/speculation_cases.hpp's
// kDraftPairCases, 10^5 drafts drawn from q and verified on the device hold
// the target distribution p (chi-square at p > 0.001) and are accepted at
// the rate sum min(p, q), as the CPU sampler's test
// (tests/core/test_speculation_q.cpp) holds the CPU rule; and the CUDA
// sampler returns the CPU sampler's tokens for the same rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cpu_sampler.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/sampler.hpp"
#include "sampling.hpp"
#include "support/skip.hpp"
#include "rejection_batch.hpp"
#include "support/speculation_cases.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace lc = llmk::cuda;

namespace {

// The device parameters of a sampled row under `p` (no penalty slot).
lc::SamplingRowParams row_params(const llmk::SamplingParams& p, uint64_t seed, uint64_t step) {
  lc::SamplingRowParams r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : 0.0f;
  r.repetition_penalty = p.repetition_penalty;
  r.seed = seed;
  r.step = step;
  return r;
}

}  // namespace

TEST_CASE("drafts drawn from q and verified on the device by min(1, p/q) give the target distribution p: 10^5 "
          "draws pass chi-square at p > 0.001",
          "[sampling][speculation]") {
  // 7 x 10^5 simulated blocks through a kernel the sanitizers do not
  // instrument; the token-for-token case below sanitizes the same launches.
  LLMK_SKIP_WHEN_SANITIZED("10^5 draws per case through the uninstrumented sampling kernel");
  using namespace llmk::test;
  RejectionBatch batch;
  const int32_t vocab = batch.vocab;
  const std::vector<float>& raw = batch.raw;
  const std::vector<int32_t>& history = batch.history;
  const int64_t draws = batch.draws;
  const lc::PenaltyState penalties = batch.penalties();
  // Every draw verifies against the same q: one dense row, spread from the
  // sparse entries as the CUDA sampler does.
  device_buffer<float> draft_q(std::vector<float>(size_t(vocab), 0.0f));
  for (const DraftPairCase& c : kDraftPairCases) {
    const llmk::SamplingParams pt = c.target.params(), pd = c.draft.params();
    const std::vector<double> p = target_distribution(raw, pt, history);
    const std::vector<double> q = target_distribution(draft_pair_logits(c), pd, history);
    const std::vector<llmk::TokenProb> q_row = as_token_probs(q);
    const double acceptance = expected_acceptance(p, q);
    INFO(c.name << ": expected acceptance " << acceptance);
    std::vector<lc::DraftProbEntry> entries;
    for (const llmk::TokenProb& t : q_row) entries.push_back({0, t.id, t.prob});
    device_buffer<lc::DraftProbEntry> d_entries(entries);
    CUDA_REQUIRE(lc::scatter_draft_probs(draft_q.get(), vocab, d_entries.get(), static_cast<int32_t>(entries.size()),
                                         false, nullptr));
    std::vector<lc::SamplingRowParams> params(static_cast<size_t>(draws));
    std::vector<int32_t> drafts(static_cast<size_t>(draws));
    for (int64_t d = 0; d < draws; ++d) {
      const uint64_t seed = uint64_t(d) * 7919u + 1;  // the CPU test's seeds and draft draws
      drafts[size_t(d)] = llmk::draw_from(q_row, llmk::draft_uniform(seed, 0, history.size()));
      lc::SamplingRowParams& r = params[size_t(d)] = row_params(pt, seed, history.size());
      r.penalty_slot = 0;
      r.draft_token = drafts[size_t(d)];
      r.draft_q_row = 0;
    }
    device_buffer<lc::SamplingRowParams> d_params(params);
    CUDA_REQUIRE(lc::sample_rows(batch.logits.get(), vocab, static_cast<int32_t>(draws), vocab, d_params.get(), penalties,
                                 batch.workspace.get(), batch.tokens.get(), nullptr, nullptr, draft_q.get()));
    CUDA_REQUIRE(lc::scatter_draft_probs(draft_q.get(), vocab, d_entries.get(), static_cast<int32_t>(entries.size()),
                                         true, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<int32_t> got = batch.tokens.download();
    std::vector<int64_t> histogram(vocab, 0), draft_histogram(vocab, 0);
    int64_t accepted = 0;
    for (int64_t d = 0; d < draws; ++d) {
      const int32_t t = got[size_t(d)];
      REQUIRE((t >= 0 && t < vocab));
      ++histogram[size_t(t)];
      ++draft_histogram[size_t(drafts[size_t(d)])];
      accepted += t == drafts[size_t(d)];
    }
    const auto [draft_stat, draft_critical] = chi_square(draft_histogram, q, draws);
    CHECK(draft_stat < draft_critical);  // the drafts follow q
    const auto [stat, critical] = chi_square(histogram, p, draws);
    CHECK(stat < critical);  // the emitted tokens follow p
    if (std::getenv("LLMK_PRINT_CHI2"))
      std::printf("device %s: chi-square %.1f < %.1f, acceptance %.4f (expected %.4f)\n", c.name, stat, critical,
                  double(accepted) / double(draws), acceptance);
    // A row emits its draft exactly when it accepts it: the rate is
    // sum min(p, q), within 4.5 standard deviations.
    const double sd = std::sqrt(std::max(0.0, acceptance * (1 - acceptance)) / double(draws));
    CHECK(std::abs(double(accepted) / double(draws) - acceptance) <= 4.5 * sd + 1e-9);
  }
  // Cleared after every case: the dense row is zero again.
  for (const float v : draft_q.download()) CHECK(v == 0.0f);
}

TEST_CASE("the CUDA sampler verifies drafts drawn from q token for token as the CPU sampler", "[cuda_sampler][speculation]") {
  // Every pair's target parameters as a request of its own, its q sparse
  // beside rows with drafts proposed with certainty and rows without, over
  // two steps (the dense q is cleared between them): the device's ids are
  // the CPU sampler's.
  using namespace llmk::test;
  reset_simulator(2);
  const int32_t vocab = kRejectionVocab;
  auto device = llmk::make_cuda_sampler(vocab);
  llmk::CpuSampler cpu(vocab, 1);
  const std::vector<int32_t> history = rejection_history();  // as the prompt: the repetition penalty reads it
  const std::vector<float> raw = rejection_logits();
  constexpr int kPerCase = 6;
  struct Live {
    uint64_t key;
    const DraftPairCase* pair;
    std::vector<llmk::TokenProb> q;
    int32_t num_generated;
  };
  std::vector<Live> live;
  for (const DraftPairCase& c : kDraftPairCases)
    for (int i = 0; i < kPerCase; ++i) {
      const llmk::SamplingParams p = c.target.params();
      const uint64_t key = 100 + live.size();
      device->open(key, p, key * 31, history, 1);
      cpu.open(key, p, key * 31, history, 1);
      const std::vector<double> q = target_distribution(draft_pair_logits(c), c.draft.params(), history);
      live.push_back({key, &c, as_token_probs(q), 0});
    }
  int accepted = 0, rejected = 0;
  for (int step = 0; step < 2; ++step) {
    std::vector<llmk::DeviceSampler::Row> rows;
    std::vector<float> logits;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& r = live[i];
      llmk::DeviceSampler::Row row{r.key, 0, r.num_generated, -1, {}};
      // Most rows verify a draft drawn from q; every fifth one a draft made
      // with certainty, every seventh none.
      if (i % 7 != 3) row.draft_token = llmk::draw_from(r.q, llmk::draft_uniform(r.key * 31, 0, r.num_generated));
      if (i % 5 != 1 && row.draft_token >= 0) row.draft_probs = r.q;
      rows.push_back(row);
      logits.insert(logits.end(), raw.begin(), raw.end());
    }
    const auto num_rows = static_cast<int32_t>(rows.size());
    device_buffer<float> d_logits(logits);
    llmk::LogitsView view;
    view.device = llmk::Device::cuda;
    view.data = d_logits.get();
    view.num_rows = num_rows;
    view.vocab_size = vocab;
    view.row_stride = vocab;
    std::vector<llmk::SampledToken> got(rows.size()), want(rows.size());
    device->sample(view, rows, got);
    const llmk::LogitsView host_view{llmk::Device::cpu, logits.data(), num_rows, vocab, vocab, {}, {}};
    cpu.sample(host_view, rows, want);
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO("step " << step << ", row " << i << " (" << live[i].pair->name << "), draft " << rows[i].draft_token
                   << (rows[i].draft_probs.empty() ? " with certainty" : " from q"));
      REQUIRE(got[i].token_id == want[i].token_id);
      if (!rows[i].draft_probs.empty()) (got[i].token_id == rows[i].draft_token ? accepted : rejected) += 1;
      ++live[i].num_generated;
    }
  }
  CHECK(accepted > 5);
  CHECK(rejected > 5);
  REQUIRE_NO_SIMULATED_RACES();
}
