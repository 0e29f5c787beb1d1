// The CUDA sampler's verification rows (SamplingRowParams::draft_token)
// under the simulation: 10^5 draws per case hold the target distribution
// (the CPU sampler's statistical cases, tests/support/speculation_cases.hpp),
// and a verifying step's rows read the drafts before them as history and
// give back the ids of rejected rows, token for token as the CPU sampler.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
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

TEST_CASE("a sampled device row verifying a draft keeps the target distribution: 10^5 draws pass chi-square at "
          "p > 0.001",
          "[sampling][speculation]") {
  // 4 x 10^5 simulated blocks through a kernel the sanitizers do not
  // instrument; the token-for-token case below sanitizes the same launches.
  LLMK_SKIP_WHEN_SANITIZED("10^5 draws through the uninstrumented sampling kernel");
  using namespace llmk::test;
  RejectionBatch batch;
  const int32_t vocab = batch.vocab;
  const std::vector<float>& raw = batch.raw;
  const std::vector<int32_t>& history = batch.history;
  const int64_t draws = batch.draws;
  const lc::PenaltyState penalties = batch.penalties();
  for (const RejectionCase& c : kRejectionCases) {
    const llmk::SamplingParams p = c.params();
    const std::vector<double> target = target_distribution(raw, p, history);
    // The case's 10^5 draws verify its three drafts in turn (draw d the
    // draft d % 3): each draft's draws and all of them together must be
    // distributed as p.
    const std::vector<int32_t> drafts = rejection_drafts(target);
    std::vector<lc::SamplingRowParams> params(static_cast<size_t>(draws));
    for (int64_t d = 0; d < draws; ++d) {
      lc::SamplingRowParams& r = params[size_t(d)];
      r.temperature = p.temperature;
      r.top_k = p.top_k;
      r.top_p = p.top_p;
      r.min_p = p.min_p;
      r.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : 0.0f;
      r.repetition_penalty = p.repetition_penalty;
      r.seed = uint64_t(d) * 7919u + 1;  // the CPU test's seeds
      r.step = history.size();
      r.penalty_slot = 0;
      r.draft_token = drafts[size_t(d % 3)];
    }
    device_buffer<lc::SamplingRowParams> d_params(params);
    CUDA_REQUIRE(lc::sample_rows(batch.logits.get(), vocab, static_cast<int32_t>(draws), vocab, d_params.get(), penalties,
                                 batch.workspace.get(), batch.tokens.get(), nullptr, nullptr));
    CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::vector<int32_t> got = batch.tokens.download();
    std::vector<int64_t> all(vocab, 0);
    for (size_t k = 0; k < drafts.size(); ++k) {
      const int32_t draft = drafts[k];
      const double pd = target[size_t(draft)];
      INFO(c.name << ", draft " << draft << " of probability " << pd);
      std::vector<int64_t> histogram(vocab, 0);
      int64_t n = 0, accepted = 0;
      for (size_t d = k; d < got.size(); d += drafts.size()) {
        const int32_t t = got[d];
        REQUIRE((t >= 0 && t < vocab));
        ++histogram[size_t(t)];
        ++all[size_t(t)];
        ++n;
        accepted += t == draft;
      }
      const auto [stat, critical] = chi_square(histogram, target, n);
      CHECK(stat < critical);
      if (std::getenv("LLMK_PRINT_CHI2"))
        std::printf("device %s, draft p %.3f: chi-square %.1f < %.1f\n", c.name, pd, stat, critical);
      // The draft is accepted with its own probability: 4.5 standard deviations.
      CHECK(std::abs(double(accepted) / double(n) - pd) <= 4.5 * std::sqrt(pd * (1 - pd) / double(n)) + 1e-9);
    }
    INFO(c.name << ", all drafts");
    const auto [stat, critical] = chi_square(all, target, draws);
    CHECK(stat < critical);
  }
}

TEST_CASE("the CUDA sampler's verification rows read the drafts before them as history and give back rejected ids, "
          "token for token as the CPU sampler",
          "[cuda_sampler][speculation]") {
  // Steps of k + 1 rows per sample with drafts (some right, some wrong),
  // penalties that make every row depend on its history, greedy and
  // sampled requests, both samplers fed the same rows; after each step the
  // histories are cut after the first rejected draft, as the sampler actor
  // does.
  reset_simulator(1);
  const int32_t vocab = 97;
  auto device = llmk::make_cuda_sampler(vocab);
  llmk::CpuSampler cpu(vocab, 1);
  struct Live {
    uint64_t key;
    llmk::SamplingParams params;
    int32_t num_generated = 0;
  };
  std::vector<Live> live(4);
  for (size_t i = 0; i < live.size(); ++i) {
    llmk::SamplingParams& p = live[i].params;
    p.temperature = i == 0 ? 0.0f : 0.9f;
    p.repetition_penalty = 1.4f;
    p.frequency_penalty = i % 2 == 0 ? 0.6f : 0.0f;
    p.presence_penalty = i == 3 ? 0.3f : 0.0f;
    p.top_k = i == 2 ? 12 : 0;
    p.top_p = i == 3 ? 0.9f : 1.0f;
    p.logprobs = i == 1 ? 3 : -1;
    live[i].key = 40 + i;
    const std::vector<int32_t> prompt = random_ints(6, 9 + i, 0, vocab - 1);
    device->open(live[i].key, p, 100 + i, prompt, 1);
    cpu.open(live[i].key, p, 100 + i, prompt, 1);
  }
  std::mt19937 rng(5);
  int num_rejected = 0, num_accepted = 0;
  for (int step = 0; step < 12; ++step) {
    std::vector<llmk::DeviceSampler::Row> rows;
    for (Live& r : live) {
      const int32_t k = static_cast<int32_t>(rng() % 4);  // 0..3 drafts
      for (int32_t j = 0; j <= k; ++j)
        rows.push_back({r.key, 0, r.num_generated + j, j < k ? static_cast<int32_t>(rng() % 8) : -1});
    }
    const auto num_rows = static_cast<int32_t>(rows.size());
    std::vector<float> logits = random_floats(static_cast<size_t>(num_rows) * vocab, 300 + step, -2.0f, 2.0f);
    // Drafts among the likeliest tokens, so that some are accepted.
    for (int32_t i = 0; i < num_rows; ++i)
      if (rows[size_t(i)].draft_token >= 0) logits[size_t(i) * vocab + size_t(rows[size_t(i)].draft_token)] += 3.0f;
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
      INFO("step " << step << ", row " << i << ", request " << rows[i].request_key << ", draft "
                   << rows[i].draft_token);
      REQUIRE(got[i].token_id == want[i].token_id);
      if (want[i].has_logprobs) {
        REQUIRE(got[i].logprobs.top.size() == want[i].logprobs.top.size());
        for (size_t j = 0; j < want[i].logprobs.top.size(); ++j) {
          CHECK(got[i].logprobs.top[j].first == want[i].logprobs.top[j].first);
          CHECK(std::fabs(got[i].logprobs.top[j].second - want[i].logprobs.top[j].second) < 1e-5f);
        }
      }
    }
    // The sampler actor's cut: each sample keeps its ids up to its first rejected draft.
    for (size_t i = 0; i < rows.size();) {
      Live& r = *std::find_if(live.begin(), live.end(), [&](const Live& l) { return l.key == rows[i].request_key; });
      size_t end = i;
      while (end < rows.size() && rows[end].request_key == r.key) ++end;
      int32_t kept = 0;
      for (size_t j = i; j < end; ++j) {
        ++kept;
        if (rows[j].draft_token >= 0 && got[j].token_id != rows[j].draft_token) {
          ++num_rejected;
          device->truncate_history(r.key, 0, r.num_generated + kept);
          cpu.truncate_history(r.key, 0, r.num_generated + kept);
          break;
        }
        num_accepted += rows[j].draft_token >= 0;
      }
      r.num_generated += kept;
      i = end;
    }
  }
  CHECK(num_rejected > 5);
  CHECK(num_accepted > 5);
  CHECK_THROWS_WITH(device->truncate_history(live[0].key, 0, live[0].num_generated + 1),
                    Catch::Contains("truncate_history to"));
}
