// The sampler actor keeps each request's sampling state and is sent only
// deltas (actors/messages.hpp, SampleWork). These tests check that what it
// samples equals generate() (core/generate.hpp), which hands the Sampler the
// sequence's whole history at every step: seeded draws with repetition,
// frequency and presence penalties, alone, batched, and under a KV budget
// that preempts (recompute and offload), with n > 1 requests among them.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/generate.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "engine_fixture.hpp"

namespace {

using namespace llmk;
using namespace llmk::test;

struct Job {
  std::string id;
  std::vector<int32_t> prompt;  // BOS first
  SamplingParams sampling;
};

// Requests that exercise every piece of sampling state: penalties over the
// prompt and the generated ids, temperatures and truncation, seeds, n = 2.
std::vector<Job> make_jobs(int32_t vocab) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1), len(2, 40), gen(8, 40);
  std::vector<Job> jobs;
  for (int i = 0; i < 10; ++i) {
    Job j;
    j.id = "s" + std::to_string(i);
    j.prompt.push_back(1);
    for (int32_t k = len(rng); k > 0; --k) j.prompt.push_back(tok(rng));
    SamplingParams& s = j.sampling;
    s.max_tokens = gen(rng);
    s.ignore_eos = true;
    s.seed = 500 + i;
    s.temperature = i % 5 == 4 ? 0.0f : 0.7f + 0.1f * static_cast<float>(i % 3);
    s.repetition_penalty = i % 2 == 0 ? 1.3f : 1.0f;
    s.frequency_penalty = i % 3 == 0 ? 0.6f : 0.0f;
    s.presence_penalty = i % 3 == 1 ? 0.4f : 0.0f;
    s.top_k = i % 4 == 1 ? 40 : 0;
    s.top_p = i % 4 == 2 ? 0.9f : 1.0f;
    s.n = i % 4 == 3 ? 2 : 1;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

Request to_request(const Job& j) {
  Request r;
  r.id = j.id;
  r.prompt_token_ids = j.prompt;
  r.sampling = j.sampling;
  return r;
}

std::map<std::string, RequestResult> run_all(Engine& engine, const std::vector<Job>& jobs) {
  Collector collector;
  for (const Job& j : jobs) engine.submit(to_request(j), collector.callback());
  REQUIRE(collector.wait_done(jobs.size(), std::chrono::seconds(60)));
  return collector.results();
}

}  // namespace

TEST_CASE("seeded sampling with penalties through the engine equals generation given the whole history",
          "[engine][sampling]") {
  // The reference: one sequence at a time on the model, the Sampler given
  // prompt and generated ids in full at every token.
  std::map<std::string, std::vector<int32_t>> expected;
  std::vector<Job> jobs;
  {
    std::shared_ptr<const Checkpoint> ckpt = load_checkpoint(LLMK_SHARED_DIR "/models/stories260K");
    PluginRegistry plugins;
    EngineConfig cfg;
    cfg.executor.num_threads = 1;
    cfg.kv_cache.capacity_tokens = 1024;
    Model model(ckpt, plugins, cfg, resolve_runtime(cfg, *ckpt));
    jobs = make_jobs(model.config().vocab_size);
    for (const Job& j : jobs)
      expected[j.id] = generate(model, j.prompt, j.sampling, {}, [](int32_t) { return true; }).token_ids;
  }

  std::map<std::string, RequestResult> roomy;
  {
    Engine engine(stories_config());
    roomy = run_all(engine, jobs);
  }
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    EngineConfig cfg = stories_config();
    cfg.kv_cache.capacity_tokens = 192;  // 12 blocks of 16: a few requests at a time, preempting
    cfg.kv_cache.enable_prefix_caching = false;
    cfg.scheduler.max_num_batched_tokens = 48;
    cfg.scheduler.preemption = mode;
    Engine engine(cfg);
    const auto tight = run_all(engine, jobs);
    for (const Job& j : jobs) {
      INFO("request " << j.id);
      const RequestResult& got = tight.at(j.id);
      CHECK(got.violations.empty());
      REQUIRE(got.samples.size() == static_cast<size_t>(j.sampling.n));
      CHECK(got.sample(0).error == "");
      CHECK(got.sample(0).token_ids == expected.at(j.id));
      CHECK(roomy.at(j.id).sample(0).token_ids == expected.at(j.id));
      if (j.sampling.n == 2) {
        // Sample 1 draws its own tokens, the same with and without preemption.
        CHECK(got.sample(1).token_ids.size() == static_cast<size_t>(j.sampling.max_tokens));
        CHECK(got.sample(1).token_ids == roomy.at(j.id).sample(1).token_ids);
        CHECK(got.sample(1).token_ids != got.sample(0).token_ids);
      }
    }
    const EngineStats stats = engine.stats();
    CHECK(stats.num_preemptions > 0);
    CHECK(stats.kv.used_slots == 0);
  }
}
