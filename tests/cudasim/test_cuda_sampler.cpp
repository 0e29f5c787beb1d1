// The CUDA DeviceSampler under the simulation against the CPU engine's
// Sampler: the same logits, parameters, seeds and histories give the same
// tokens and logprobs, step after step, while requests open, grow their
// penalty histories on the device, release their slots and are replaced;
// rows with structured outputs' token masks take the ids the CPU sampler's
// masked rows take.
#include <cmath>
#include <map>
#include <vector>

#include "core/cpu_sampler.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/grammar.hpp"
#include "core/token_bitmask.hpp"
#include "core/sampler.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

struct Live {
  uint64_t key;
  llmk::SamplingParams params;
  uint64_t seed;
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> generated;  // per sample
};

llmk::SamplingParams params_for(int kind) {
  llmk::SamplingParams p;
  switch (kind % 6) {
    case 0: p.temperature = 0.0f; break;  // greedy
    case 1: p.temperature = 0.8f, p.top_p = 0.9f; break;
    case 2: p.temperature = 1.1f, p.top_k = 20, p.repetition_penalty = 1.3f; break;
    case 3: p.temperature = 0.7f, p.min_p = 0.05f, p.frequency_penalty = 0.5f, p.presence_penalty = 0.3f; break;
    case 4: p.temperature = 1.0f, p.logprobs = 3; break;
    default: p.temperature = 0.9f, p.top_k = 50, p.top_p = 0.8f, p.repetition_penalty = 1.2f, p.logprobs = 0; break;
  }
  p.n = kind % 4 == 3 ? 2 : 1;
  return p;
}

}  // namespace

TEST_CASE("the CUDA sampler under the simulation samples the tokens and logprobs the CPU Sampler does, step after "
          "step, with device-side penalty histories",
          "[cuda_sampler]") {
  reset_simulator(1);
  const int32_t vocab = 509;
  auto device = llmk::make_cuda_sampler(vocab);
  llmk::Sampler cpu(vocab, 1);
  std::map<uint64_t, Live> live;
  uint64_t next_key = 1;
  auto open = [&](int kind) {
    Live r;
    r.key = next_key++;
    r.params = params_for(kind);
    r.seed = 1000 + r.key;
    r.prompt = random_ints(5 + kind % 7, r.key, 0, vocab - 1);
    r.generated.resize(static_cast<size_t>(r.params.n));
    device->open(r.key, r.params, r.seed, r.prompt, r.params.n);
    live.emplace(r.key, std::move(r));
  };
  // 20 requests, 14 of them with penalties: more than the first pool of 16 slots.
  for (int i = 0; i < 20; ++i) open(i);

  int compared = 0;
  for (int step = 0; step < 10; ++step) {
    if (step == 4) {
      // Release a third of the requests and open new ones: recycled slots start clean.
      for (uint64_t key = 1; key <= 20; key += 3) {
        device->release(key);
        live.erase(key);
      }
      for (int i = 0; i < 7; ++i) open(i + 2);
    }
    std::vector<llmk::DeviceSampler::Row> rows;
    std::vector<Live*> owners;
    std::vector<int32_t> samples;
    for (auto& [key, r] : live)
      for (int32_t s = 0; s < r.params.n; ++s) {
        rows.push_back({key, s, static_cast<int32_t>(r.generated[static_cast<size_t>(s)].size())});
        owners.push_back(&r);
        samples.push_back(s);
      }
    const auto num_rows = static_cast<int32_t>(rows.size());
    const int64_t stride = vocab + 3;  // padded rows, as an executor may hand out
    std::vector<float> logits = random_floats(static_cast<size_t>(num_rows) * stride, 77 + step, -4.0f, 4.0f);
    device_buffer<float> d_logits(logits);
    llmk::LogitsView view;
    view.device = llmk::Device::cuda;
    view.data = d_logits.get();
    view.num_rows = num_rows;
    view.vocab_size = vocab;
    view.row_stride = stride;
    std::vector<llmk::SampledToken> got(rows.size());
    device->sample(view, rows, got);

    std::vector<llmk::SamplerRow> cpu_rows(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Live& r = *owners[i];
      cpu_rows[i].logits = logits.data() + static_cast<int64_t>(i) * stride;
      cpu_rows[i].params = &r.params;
      cpu_rows[i].prompt_ids = r.prompt;
      cpu_rows[i].generated_ids = r.generated[static_cast<size_t>(samples[i])];
      cpu_rows[i].seed = r.seed;
      cpu_rows[i].sample_index = static_cast<uint32_t>(samples[i]);
    }
    std::vector<llmk::SampledToken> want(rows.size());
    cpu.sample(cpu_rows, want);
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO("step " << step << ", request " << rows[i].request_key << ", sample " << samples[i]);
      REQUIRE(got[i].token_id == want[i].token_id);
      REQUIRE(got[i].has_logprobs == want[i].has_logprobs);
      if (want[i].has_logprobs) {
        CHECK(got[i].logprobs.token_id == want[i].logprobs.token_id);
        CHECK(std::fabs(got[i].logprobs.logprob - want[i].logprobs.logprob) < 1e-5f);
        REQUIRE(got[i].logprobs.top.size() == want[i].logprobs.top.size());
        for (size_t j = 0; j < want[i].logprobs.top.size(); ++j) {
          CHECK(got[i].logprobs.top[j].first == want[i].logprobs.top[j].first);
          CHECK(std::fabs(got[i].logprobs.top[j].second - want[i].logprobs.top[j].second) < 1e-5f);
        }
      }
      ++compared;
    }
    // Histories grow by the sampled ids, on both sides.
    for (size_t i = 0; i < rows.size(); ++i)
      owners[i]->generated[static_cast<size_t>(samples[i])].push_back(want[i].token_id);
  }
  CHECK(compared > 200);
}

TEST_CASE("the CUDA sampler refuses rows of unknown requests and views it cannot read", "[cuda_sampler]") {
  reset_simulator(1);
  auto device = llmk::make_cuda_sampler(64);
  llmk::SamplingParams p;
  device->open(7, p, 1, {}, 1);
  CHECK_THROWS_WITH(device->open(7, p, 1, {}, 1), Catch::Contains("opened twice"));
  device_buffer<float> logits(64);
  llmk::LogitsView view;
  view.device = llmk::Device::cuda;
  view.data = logits.get();
  view.num_rows = 1;
  view.vocab_size = 64;
  view.row_stride = 64;
  std::vector<llmk::SampledToken> out(1);
  const std::vector<llmk::DeviceSampler::Row> unknown{{8, 0, 0}};
  CHECK_THROWS_WITH(device->sample(view, unknown, out), Catch::Contains("no state for request 8"));
  view.device = llmk::Device::cpu;
  const std::vector<llmk::DeviceSampler::Row> known{{7, 0, 0}};
  CHECK_THROWS_WITH(device->sample(view, known, out), Catch::Contains("a view of device 'cpu'"));
}

TEST_CASE("the CUDA sampler applies structured outputs' token masks as the CPU sampler does, greedy, sampled, "
          "penalised and with logprobs",
          "[cuda_sampler][structured]") {
  reset_simulator(1);
  const int32_t vocab = 509;  // 16 mask words, the last one partly used
  const auto words = static_cast<size_t>(llmk::bitmask_words(vocab));
  auto device = llmk::make_cuda_sampler(vocab);
  llmk::CpuSampler cpu(vocab, 1);
  std::vector<llmk::SamplingParams> params;
  for (int kind = 0; kind < 12; ++kind) {
    params.push_back(params_for(kind));
    params.back().n = 1;
    const std::vector<int32_t> prompt = random_ints(4 + kind % 5, 40 + kind, 0, vocab - 1);
    device->open(100 + kind, params.back(), 900 + kind, prompt, 1);
    cpu.open(100 + kind, params.back(), 900 + kind, prompt, 1);
  }
  int masked_rows = 0;
  for (int step = 0; step < 8; ++step) {
    // Per row: no mask, a random third of the vocabulary, the tokens the
    // logits like least, or a single token.
    std::vector<std::vector<uint32_t>> masks(params.size());
    std::vector<llmk::DeviceSampler::Row> rows;
    const std::vector<float> logits = random_floats(params.size() * size_t(vocab), 300 + step, -4.0f, 4.0f);
    for (size_t i = 0; i < params.size(); ++i) {
      llmk::DeviceSampler::Row row{100 + i, 0, step};
      const int shape = static_cast<int>((i + size_t(step)) % 4);
      if (shape > 0) {
        std::vector<uint32_t>& m = masks[i];
        m.assign(words, 0u);
        const auto allow = [&](int32_t id) { m[size_t(id) / 32] |= 1u << (id % 32); };
        if (shape == 1) {
          for (int32_t id : random_ints(vocab / 3, 500 + step * 31 + int(i), 0, vocab - 1)) allow(id);
        } else if (shape == 2) {
          const float* r = logits.data() + i * size_t(vocab);
          for (int32_t id = 0; id < vocab; ++id)
            if (r[id] < -3.0f) allow(id);
        } else {
          allow((step * 37 + int(i) * 11) % vocab);
        }
        row.token_bitmask = m;
        ++masked_rows;
      }
      rows.push_back(row);
    }
    device_buffer<float> d_logits(logits);
    llmk::LogitsView view;
    view.device = llmk::Device::cuda;
    view.data = d_logits.get();
    view.num_rows = static_cast<int32_t>(rows.size());
    view.vocab_size = vocab;
    view.row_stride = vocab;
    std::vector<llmk::SampledToken> got(rows.size()), want(rows.size());
    device->sample(view, rows, got);
    llmk::LogitsView host_view = view;
    host_view.device = llmk::Device::cpu;
    host_view.data = logits.data();
    cpu.sample(host_view, rows, want);
    for (size_t i = 0; i < rows.size(); ++i) {
      INFO("step " << step << ", row " << i);
      REQUIRE(got[i].token_id == want[i].token_id);
      if (!masks[i].empty()) {
        CHECK(llmk::token_allowed(masks[i], got[i].token_id));
      }
      REQUIRE(got[i].has_logprobs == want[i].has_logprobs);
      if (want[i].has_logprobs) {
        CHECK(got[i].logprobs.token_id == want[i].logprobs.token_id);
        CHECK(got[i].logprobs.logprob == Approx(want[i].logprobs.logprob).margin(1e-5));
        REQUIRE(got[i].logprobs.top.size() == want[i].logprobs.top.size());
        for (size_t j = 0; j < want[i].logprobs.top.size(); ++j)
          CHECK(got[i].logprobs.top[j].first == want[i].logprobs.top[j].first);
      }
    }
  }
  CHECK(masked_rows >= 60);
}
