// Scheduler unit tests over a fake paged allocator and a fake model whose
// output is a hash of the K/V it reads back (tests/core/scheduler_fakes.hpp).
// Expected tokens come from reference_output(), which never sees the
// scheduler, so every comparison checks batching, KV addressing, prefix
// caching, forks and preemption at once.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "scheduler_fakes.hpp"

using namespace llmk;
using namespace llmk::test;

namespace {

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t len) {
  std::uniform_int_distribution<int32_t> d(10, 30000);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = d(rng);
  return p;
}

SamplingParams params(int32_t max_tokens, int32_t n = 1) {
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.n = n;
  return sp;
}

struct Submitted {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sp;
};

// Every sample of every request matches the reference and ended exactly once.
void check_against_reference(const Harness& h, const std::vector<Submitted>& reqs) {
  for (const Submitted& r : reqs) {
    CHECK(h.num_done.at(r.id) == 1);
    for (int32_t i = 0; i < r.sp.n; ++i) {
      INFO("request " << r.id << " sample " << i);
      const Outcome& o = h.out.at({r.id, i});
      const Expected e = reference_output(r.prompt, r.sp, i, h.limits.eos_token_ids, h.limits.max_seq_len);
      CHECK(o.tokens == e.tokens);
      CHECK(o.reason == e.reason);
      CHECK(o.num_final_events == 1);
      CHECK(o.num_events_after_final == 0);
    }
  }
}

std::vector<Submitted> submit_random(Harness& h, std::mt19937& rng, int num, int32_t min_len, int32_t max_len,
                                     int32_t max_tokens) {
  std::vector<Submitted> reqs;
  std::uniform_int_distribution<int32_t> len(min_len, max_len), gen(1, max_tokens);
  for (int i = 0; i < num; ++i) {
    Submitted r{"r" + std::to_string(i), random_prompt(rng, len(rng)), params(gen(rng))};
    h.sched.add_request(r.id, r.prompt, r.sp);
    reqs.push_back(r);
  }
  return reqs;
}

}  // namespace

TEST_CASE("every step respects the token budget and the sequence limit, and outputs match the reference",
          "[scheduler]") {
  std::mt19937 rng(1);
  Harness h(scheduler_section(5, 24), 200, 4);
  auto reqs = submit_random(h, rng, 30, 1, 60, 20);
  h.run();
  for (const auto& p : h.plans) {
    CHECK(p.num_tokens <= 24);
    CHECK(p.num_seqs <= 5);
    CHECK(p.num_tokens >= 1);
  }
  check_against_reference(h, reqs);
  const SchedulerStats s = h.sched.stats();
  CHECK(s.num_steps == h.plans.size());
  CHECK(s.peak_running <= 5);
  CHECK(s.num_requests_finished == 30);
  CHECK(s.kv.num_seqs == 0);
  CHECK(h.kv.num_live_blocks() == 0);
}

TEST_CASE("a long prompt is prefilled in chunks of the token budget", "[scheduler]") {
  std::mt19937 rng(2);
  Harness h(scheduler_section(4, 32), 100, 8);
  Submitted r{"long", random_prompt(rng, 100), params(3)};
  h.sched.add_request(r.id, r.prompt, r.sp);
  std::vector<int32_t> chunk_sizes, logits_per_step;
  for (int i = 0; i < 4; ++i) {
    StepPlan plan = h.sched.schedule();
    REQUIRE(plan.seqs.size() == 1);
    CHECK(plan.seqs[0].is_prefill);
    CHECK(plan.seqs[0].first_new_position == 32 * i);
    chunk_sizes.push_back(plan.batch.num_tokens());
    logits_per_step.push_back(plan.batch.num_logits());
    h.absorb(h.sched.update_from_output(plan, h.model.forward(plan)));
  }
  CHECK(chunk_sizes == std::vector<int32_t>{32, 32, 32, 4});
  CHECK(logits_per_step == std::vector<int32_t>{0, 0, 0, 1});
  h.run();
  check_against_reference(h, {r});
  CHECK(h.sched.stats().num_prefill_tokens == 100);
}

TEST_CASE("a step mixes decodes of running sequences with a prefill chunk", "[scheduler]") {
  std::mt19937 rng(3);
  Harness h(scheduler_section(8, 16), 200, 4);
  std::vector<Submitted> reqs{{"a", random_prompt(rng, 5), params(30)}, {"b", random_prompt(rng, 6), params(30)}};
  for (auto& r : reqs) h.sched.add_request(r.id, r.prompt, r.sp);
  h.step();  // both prompts prefilled together
  CHECK(h.plans.back().num_prefill_chunks == 2);
  h.step();
  CHECK(h.plans.back().num_decodes == 2);
  reqs.push_back({"c", random_prompt(rng, 40), params(5)});
  h.sched.add_request("c", reqs.back().prompt, reqs.back().sp);
  h.step();
  // Decodes come first, the new prompt gets what is left of the budget.
  CHECK(h.plans.back().num_decodes == 2);
  CHECK(h.plans.back().num_prefill_chunks == 1);
  CHECK(h.plans.back().num_tokens == 16);
  CHECK(h.plans.back().request_ids == std::vector<std::string>{"a", "b", "c"});
  h.run();
  check_against_reference(h, reqs);
}
