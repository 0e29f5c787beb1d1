// Scheduler overhead: microseconds of schedule() + update_from_output() per
// step (no forward: tokens are drawn at random), over the kv.paged plugin.
// The serving loop pays this once per step on top of the forward.
//   bench_scheduler [num_requests=2000] [max_num_seqs=64] [max_num_batched_tokens=512] [kv_slots=32768]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/plugin_loader.hpp"
#include "core/scheduler.hpp"

int main(int argc, char** argv) {
  const int num_requests = argc > 1 ? std::atoi(argv[1]) : 2000;
  const uint32_t max_num_seqs = argc > 2 ? uint32_t(std::atoi(argv[2])) : 64;
  const uint32_t max_batched = argc > 3 ? uint32_t(std::atoi(argv[3])) : 512;
  const uint32_t num_slots = argc > 4 ? uint32_t(std::atoi(argv[4])) : 32768;
  const uint32_t max_seq_len = 2048;

  llmk::PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, 16, max_seq_len, 1, "{}", nullptr, nullptr};
  llmk::KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  llmk::SchedulerSection section;
  section.max_num_seqs = max_num_seqs;
  section.max_num_batched_tokens = max_batched;
  section.max_queue = uint32_t(num_requests);
  llmk::Scheduler sched(section, llmk::SchedulerLimits{int32_t(max_seq_len), {2}, 32000}, kv);

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, 31999), prompt_len(16, 512), gen_len(16, 256);
  for (int i = 0; i < num_requests; ++i) {
    std::vector<int32_t> prompt(size_t(prompt_len(rng)));
    for (auto& t : prompt) t = tok(rng);
    llmk::SamplingParams sp;
    sp.max_tokens = gen_len(rng);
    sched.add_request("r" + std::to_string(i), std::move(prompt), sp);
  }
  double schedule_s = 0, update_s = 0;
  uint64_t num_steps = 0;
  std::vector<int32_t> sampled;
  while (sched.has_work()) {
    auto t0 = std::chrono::steady_clock::now();
    llmk::StepPlan plan = sched.schedule();
    auto t1 = std::chrono::steady_clock::now();
    sampled.resize(plan.logits.size());
    for (auto& t : sampled) t = tok(rng);
    auto t2 = std::chrono::steady_clock::now();
    sched.update_from_output(plan, sampled);
    auto t3 = std::chrono::steady_clock::now();
    schedule_s += std::chrono::duration<double>(t1 - t0).count();
    update_s += std::chrono::duration<double>(t3 - t2).count();
    num_steps += 1;
  }
  const llmk::SchedulerStats s = sched.stats();
  std::printf("requests %d, steps %llu, mean batch %.1f seqs / %.1f tokens, preemptions %llu\n", num_requests,
              (unsigned long long)num_steps, s.mean_batch_seqs(), s.mean_batch_tokens(),
              (unsigned long long)s.num_preemptions);
  std::printf("schedule() %.1f us/step, update_from_output() %.1f us/step\n", 1e6 * schedule_s / double(num_steps),
              1e6 * update_s / double(num_steps));
  return 0;
}
