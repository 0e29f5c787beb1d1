// The scheduler over the real KV allocator plugins (kv.paged, kv.contiguous,
// kv.vm) loaded through the plugin registry, with the fake model of
// scheduler_fakes.hpp: the same workloads must give the reference tokens
// under preemption (recompute and offload), forks and prefix caching.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "core/plugin_loader.hpp"
#include "scheduler_fakes.hpp"

using namespace llmk;
using namespace llmk::sched_test;

namespace {

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sp;
};

std::vector<Job> make_jobs(uint32_t seed, int num, int32_t max_prompt, bool shared_prefix) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(10, 30000), len(1, max_prompt), gen(1, 40), pick(0, 9);
  std::vector<int32_t> prefix(32);
  for (auto& t : prefix) t = tok(rng);
  std::vector<Job> jobs;
  for (int i = 0; i < num; ++i) {
    Job j;
    j.id = "j";
    j.id += std::to_string(i);
    if (shared_prefix && pick(rng) < 5) j.prompt = prefix;
    for (int32_t k = len(rng); k > 0; --k) j.prompt.push_back(tok(rng));
    j.sp.max_tokens = gen(rng);
    j.sp.n = pick(rng) == 0 ? 3 : 1;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace

TEST_CASE("with every allocator plugin, outputs match the reference under preemption, forks and prefix caching",
          "[scheduler][plugins]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO(plugin << ", preemption " << mode);
  const uint32_t max_seq_len = 96;
  const uint32_t num_slots = 6 * max_seq_len;  // six contiguous regions; tight for the others too
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, 8, max_seq_len, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  FakeModel model(num_slots);
  SchedulerLimits limits{int32_t(max_seq_len), {}, 0};
  Scheduler sched(scheduler_section(12, 40, "continuous", mode), limits, kv,
                  SchedulerOptions{.clock = [] { return TimePoint{}; }, .offloader = &model});

  const std::vector<Job> jobs = make_jobs(21, 60, 40, plugin == "kv.paged");
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> tokens;
  std::map<std::string, int> done;
  size_t next_job = 0;
  for (int step = 0; next_job < jobs.size() || sched.has_work(); ++step) {
    REQUIRE(step < 20000);
    for (int k = 0; k < 3 && next_job < jobs.size(); ++k, ++next_job)  // a steady arrival stream
      sched.add_request(jobs[next_job].id, jobs[next_job].prompt, jobs[next_job].sp);
    StepPlan plan = sched.schedule();
    std::vector<TokenEvent> events = plan.events;
    if (!plan.empty()) {
      const std::vector<TokenEvent> more = sched.update_from_output(plan, model.forward(plan));
      events.insert(events.end(), more.begin(), more.end());
    }
    for (const TokenEvent& e : events) {
      if (e.token_id) tokens[{e.request_id, e.index}].push_back(*e.token_id);
      CHECK(e.error == "");
      if (e.request_done) done[e.request_id] += 1;
    }
  }
  for (const Job& j : jobs) {
    INFO("request " << j.id);
    CHECK(done[j.id] == 1);
    for (int32_t i = 0; i < j.sp.n; ++i)
      CHECK(tokens[{j.id, i}] == reference_output(j.prompt, j.sp, i, {}, int32_t(max_seq_len)).tokens);
  }
  const SchedulerStats s = sched.stats();
  if (plugin == "kv.contiguous") {
    CHECK(s.peak_running <= 6);  // one max_seq_len region each: admission is the limit, growth never fails
  } else {
    CHECK(s.num_preemptions > 0);
    if (mode == "offload") CHECK(s.num_restores > 0);
  }
  CHECK(s.kv.num_seqs == 0);
  CHECK(s.kv.reserved_slots == s.kv.cached_free_slots);  // only the prefix cache keeps slots
  if (plugin == "kv.paged") CHECK(s.num_cached_prompt_tokens > 0);
}
