// The scheduler driving the real forward: stories260K through the kv.paged
// plugin and the Sampler, many requests batched with chunked prefill, forks
// and preemption (recompute, and offload through the Model's save_kv /
// restore_kv). Each sample must equal generate(), which runs the same model
// on one sequence with no scheduler (greedy and seeded sampling both: the
// sampler's draws depend only on seed, sample index and step).
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <random>

#include "core/checkpoint.hpp"
#include "core/generate.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"
#include "sample_plan.hpp"

using namespace llmk;

namespace {

class ModelOffloader final : public KvOffloader {
 public:
  explicit ModelOffloader(Model& model) : model_(model) {}
  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override { return model_.save_kv(slots); }
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override {
    model_.restore_kv(slots, data);
  }

 private:
  Model& model_;
};

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sp;
};

}  // namespace

TEST_CASE("batched serving on the real model gives the tokens of unbatched generation", "[scheduler][model]") {
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO("preemption " << mode);
  std::shared_ptr<const Checkpoint> ckpt = load_checkpoint(std::string(LLMK_SHARED_DIR) + "/models/stories260K");
  PluginRegistry plugins;
  EngineConfig cfg;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 384;  // tight: forces preemption
  cfg.kv_cache.block_size = 16;
  const ModelRuntime rt = resolve_runtime(cfg, *ckpt);
  Model model(ckpt, plugins, cfg, rt);
  const int32_t vocab = model.config().vocab_size;

  std::mt19937 rng(31);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1), len(1, 60), gen(1, 40);
  std::vector<Job> jobs;
  for (int i = 0; i < 12; ++i) {
    Job j;
    j.id = "m";
    j.id += std::to_string(i);
    j.prompt.push_back(1);  // BOS
    for (int32_t k = len(rng); k > 0; --k) j.prompt.push_back(tok(rng));
    j.sp.max_tokens = gen(rng);
    j.sp.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    j.sp.seed = 1000 + i;
    j.sp.n = i % 4 == 3 ? 2 : 1;
    j.sp.ignore_eos = true;
    jobs.push_back(std::move(j));
  }
  // References first (generate() uses the cache from slot 0).
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> expected;
  for (const Job& j : jobs) {
    REQUIRE(j.sp.n <= 2);
    expected[{j.id, 0}] = generate(model, j.prompt, j.sp, {}, [](int32_t) { return true; }).token_ids;
  }

  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, 16, rt.max_seq_len, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(plugins.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  ModelOffloader offloader(model);
  SchedulerSection section;
  section.max_num_seqs = 8;
  section.max_num_batched_tokens = 48;
  section.preemption = mode;
  Scheduler sched(section, SchedulerLimits{int32_t(rt.max_seq_len), {}, vocab}, kv,
                  SchedulerOptions{.offloader = &offloader});
  Sampler sampler(vocab, 1);
  for (const Job& j : jobs) sched.add_request(j.id, j.prompt, j.sp);

  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> got;
  std::vector<float> logits;
  for (int step = 0; sched.has_work(); ++step) {
    REQUIRE(step < 5000);
    StepPlan plan = sched.schedule();
    REQUIRE(plan.events.empty());
    REQUIRE_FALSE(plan.empty());
    logits.resize(size_t(plan.batch.num_logits()) * size_t(vocab));
    model.forward(plan.batch, logits.data());
    std::vector<int32_t> sampled;
    for (const SampledToken& t : test::sample_rows(sched, sampler, plan, logits, vocab)) sampled.push_back(t.token_id);
    for (const TokenEvent& e : sched.update_from_output(plan, sampled)) {
      CHECK(e.error == "");
      if (e.token_id) got[{e.request_id, e.index}].push_back(*e.token_id);
    }
  }
  for (const Job& j : jobs) {
    INFO("request " << j.id);
    CHECK(got[{j.id, 0}] == expected[{j.id, 0}]);
    if (j.sp.n == 2) {
      CHECK(got[{j.id, 1}].size() == size_t(j.sp.max_tokens));
      if (j.sp.temperature > 0) CHECK(got[{j.id, 1}] != got[{j.id, 0}]);  // a different draw
    }
  }
  const SchedulerStats s = sched.stats();
  CHECK(s.num_preemptions > 0);
  if (mode == "offload") CHECK(s.num_restores > 0);
  CHECK(s.kv.num_seqs == 0);
}
