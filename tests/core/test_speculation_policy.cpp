// The speculation policy (speculative.max_batch_size): a step with more
// decodes than the threshold verifies no drafts, one with as many or fewer
// does; and the scheduler asks its proposer once per step for all of them.
#include <catch2/catch.hpp>

#include "core/plugin_loader.hpp"
#include "core/speculation.hpp"
#include "scheduler_fakes.hpp"

using namespace llmk;
using namespace llmk::sched_test;

namespace {

// Counts its calls and drafts the token that followed the newest one's
// previous occurrence, like prompt lookup with n = 1.
class CountingProposer final : public Proposer {
 public:
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override {
    num_calls += 1;
    num_requests += requests.size();
    inner.propose(requests, out);
  }
  void release(uint64_t) override { num_released += 1; }
  NgramProposer inner{1, 1};
  int num_calls = 0;
  size_t num_requests = 0;
  int num_released = 0;
};

// Runs num_seqs greedy requests whose prompts repeat (prompt lookup always
// has a draft) through their prefill and one decode step; returns that
// step's drafted tokens.
int32_t drafts_in_decode_step(uint32_t max_batch_size, int32_t num_seqs, CountingProposer* proposer = nullptr) {
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), 1024, 8, 128, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerOptions options;
  options.speculative.method = "ngram";
  options.speculative.num_tokens = 3;
  options.speculative.prompt_lookup_min = 1;
  options.speculative.prompt_lookup_max = 1;
  options.speculative.max_batch_size = max_batch_size;
  if (proposer != nullptr) options.proposer = std::shared_ptr<Proposer>(proposer, [](Proposer*) {});
  Scheduler sched(scheduler_section(16, 256), SchedulerLimits{128, {}, 0}, kv, options);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 8;
  for (int32_t i = 0; i < num_seqs; ++i) sched.add_request("r" + std::to_string(i), {1, 2, 3, 1, 2}, sp);
  StepPlan prefill = sched.schedule();
  REQUIRE(prefill.seqs.size() == static_cast<size_t>(num_seqs));
  sched.update_from_output(prefill, std::vector<int32_t>(static_cast<size_t>(num_seqs), 3));
  StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == static_cast<size_t>(num_seqs));
  int32_t drafts = 0;
  for (const ScheduledSeq& s : step.seqs) drafts += s.num_draft_tokens;
  return drafts;
}

}  // namespace

TEST_CASE("speculation is turned down exactly above speculative.max_batch_size decodes", "[speculation][policy]") {
  CHECK(speculation_pays(0, 1000));
  CHECK(speculation_pays(4, 4));
  CHECK_FALSE(speculation_pays(4, 5));
  for (int32_t threshold : {1, 3, 5}) {
    INFO("max_batch_size " << threshold);
    CHECK(drafts_in_decode_step(uint32_t(threshold), threshold) == threshold * 3);  // [3] drafts 1, 2, 3
    CHECK(drafts_in_decode_step(uint32_t(threshold), threshold + 1) == 0);
  }
  CHECK(drafts_in_decode_step(0, 9) == 9 * 3);  // 0: never turned down
}

TEST_CASE("the scheduler asks its proposer once per step for every decode that may draft, and tells it when a "
          "sequence ends",
          "[speculation][policy]") {
  CountingProposer proposer;
  CHECK(drafts_in_decode_step(0, 4, &proposer) == 12);
  CHECK(proposer.num_calls == 1);
  CHECK(proposer.num_requests == 4);
  CHECK(proposer.num_released == 0);  // nothing ended

  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), 256, 8, 128, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerOptions options;
  options.speculative.method = "ngram";
  CountingProposer ending;
  options.proposer = std::shared_ptr<Proposer>(&ending, [](Proposer*) {});
  Scheduler sched(scheduler_section(4, 64), SchedulerLimits{128, {}, 0}, kv, options);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 2;
  sched.add_request("r", {1, 2, 3, 1, 2}, sp);
  StepPlan prefill = sched.schedule();
  sched.update_from_output(prefill, {3});
  StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == 1);
  CHECK(step.seqs[0].num_draft_tokens == 0);  // max_tokens leaves no room for a draft
  CHECK(ending.num_requests == 0);
  const auto events = sched.update_from_output(step, {1});
  REQUIRE_FALSE(events.empty());
  CHECK(events.back().finished);
  CHECK(ending.num_released == 1);
}
