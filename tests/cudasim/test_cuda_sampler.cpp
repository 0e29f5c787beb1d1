// The CUDA DeviceSampler under the simulation against the CPU engine's
// Sampler: the same logits, parameters, seeds and histories give the same
// tokens and logprobs, step after step, while requests open, grow their
// penalty histories on the device, release their slots and are replaced.
#include <cmath>
#include <map>
#include <vector>

#include "core/cuda/cuda_sampler.hpp"
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
