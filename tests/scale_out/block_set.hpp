// The block set an event subscriber rebuilds: replaying the allocator's
// events in order from an empty set. Stored must name a block not held and
// removed one held; a violation is recorded, not thrown, so that a test can
// report it. (A stored block's parent may be gone already: a sequence that
// followed another's registration of its prefix keeps chaining from it
// after that registration is evicted.)
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include "core/kv_event_log.hpp"
#include "core/kv_allocator.hpp"
#include "core/scheduler.hpp"
#include "core/scheduler_fakes.hpp"

namespace llmk::kv_events_test {

struct Rebuilt {
  std::map<uint64_t, std::vector<int32_t>> blocks;  // hash -> tokens
  std::vector<std::string> violations;

  void apply(const KvEvent& e) {
    switch (e.type) {
      case LLMK_KV_EVENT_BLOCK_STORED:
        if (!blocks.emplace(e.block_hash, e.token_ids).second)
          violations.push_back("stored " + std::to_string(e.block_hash) + " twice");
        break;
      case LLMK_KV_EVENT_BLOCK_REMOVED:
        if (blocks.erase(e.block_hash) == 0)
          violations.push_back("removed " + std::to_string(e.block_hash) + " not held");
        break;
      case LLMK_KV_EVENT_ALL_BLOCKS_CLEARED: blocks.clear(); break;
    }
  }
  std::set<uint64_t> hashes() const {
    std::set<uint64_t> out;
    for (const auto& [h, tokens] : blocks) out.insert(h);
    return out;
  }
};

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sp;
};

// Requests over a few shared system prompts (prefix-cache hits), some with
// n = 3 (forks), arriving three per step: in a cache of `num_slots` they
// evict cached blocks and preempt running sequences.
inline std::vector<Job> shared_prefix_jobs(uint32_t seed, int num) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(10, 30000), len(1, 30), gen(8, 48), pick(0, 9);
  std::vector<std::vector<int32_t>> prefixes(4);
  for (auto& p : prefixes) {
    p.resize(8 + 8 * pick(rng) / 2);
    for (auto& t : p) t = tok(rng);
  }
  std::vector<Job> jobs;
  for (int i = 0; i < num; ++i) {
    Job j;
    j.id = std::string("j").append(std::to_string(i));  // not "j" + ...: GCC 12 warns (-Wrestrict) on that form
    if (pick(rng) < 7) j.prompt = prefixes[pick(rng) % prefixes.size()];
    for (int32_t k = len(rng); k > 0; --k) j.prompt.push_back(tok(rng));
    j.sp.max_tokens = gen(rng);
    j.sp.n = pick(rng) == 0 ? 3 : 1;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Runs the jobs through a Scheduler over `kv` with the fake model (whose
// emulated cache must be the one behind kv's cached blocks); calls
// after_step() after every step. Returns the scheduler's statistics.
template <class AfterStep>
SchedulerStats run_jobs(KvAllocator& kv, sched_test::FakeModel& model, uint32_t max_seq_len,
                        const std::vector<Job>& jobs, AfterStep after_step) {
  using namespace llmk::sched_test;
  SchedulerLimits limits{int32_t(max_seq_len), {}, 0};
  Scheduler sched(scheduler_section(12, 40, "continuous", "recompute"), limits, kv,
                  SchedulerOptions{.clock = [] { return TimePoint{}; }, .offloader = &model});
  size_t next_job = 0;
  for (int step = 0; next_job < jobs.size() || sched.has_work(); ++step) {
    if (step >= 20000) throw std::runtime_error("the workload did not finish in 20000 steps");
    for (int k = 0; k < 3 && next_job < jobs.size(); ++k, ++next_job)
      sched.add_request(jobs[next_job].id, jobs[next_job].prompt, jobs[next_job].sp);
    StepPlan plan = sched.schedule();
    if (!plan.empty()) sched.update_from_output(plan, model.forward(plan));
    after_step();
  }
  return sched.stats();
}

}  // namespace llmk::kv_events_test
