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
    std::string id = "r";
    id += std::to_string(i);
    Submitted r{id, random_prompt(rng, len(rng)), params(gen(rng))};
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

TEST_CASE("a large request at the head of the queue runs while small ones keep arriving", "[scheduler]") {
  std::mt19937 rng(4);
  // 64 blocks of 4 = 256 slots; the large request needs 216 of them.
  Harness h(scheduler_section(8, 64), 64, 4);
  std::vector<Submitted> reqs;
  std::map<std::string, size_t> arrival_step;
  auto submit = [&](const std::string& id, int32_t len, int32_t max_tokens) {
    reqs.push_back({id, random_prompt(rng, len), params(max_tokens)});
    h.sched.add_request(id, reqs.back().prompt, reqs.back().sp);
    arrival_step[id] = h.plans.size();
  };
  for (int i = 0; i < 6; ++i) submit("s" + std::to_string(i), 12, 20);
  for (int i = 0; i < 3; ++i) h.step();
  submit("big", 200, 16);
  for (int i = 6; i < 80; ++i) {
    submit("s" + std::to_string(i), 12, 20);
    h.step();
  }
  h.run();
  check_against_reference(h, reqs);
  std::map<std::string, size_t> first_step;
  for (size_t st = 0; st < h.plans.size(); ++st)
    for (const auto& id : h.plans[st].request_ids) first_step.emplace(id, st);
  // FCFS: nothing that arrived after the large request started before it.
  for (const auto& [id, step] : arrival_step)
    if (step > arrival_step["big"]) CHECK(first_step.at(id) >= first_step.at("big"));
  CHECK(first_step.at("big") < 40);
}

TEST_CASE("preemption takes the youngest running sequence first and outputs stay identical", "[scheduler]") {
  std::mt19937 rng(5);
  // 12 blocks of 4 slots: three 8-token prompts fit, their growth does not.
  Harness h(scheduler_section(8, 64), 12, 4);
  std::vector<Submitted> reqs{{"a", random_prompt(rng, 8), params(40)},
                              {"b", random_prompt(rng, 8), params(40)},
                              {"c", random_prompt(rng, 8), params(40)}};
  for (auto& r : reqs) h.sched.add_request(r.id, r.prompt, r.sp);
  while (h.sched.stats().num_preemptions == 0) REQUIRE(h.step());
  CHECK(h.sched.sample("c", 0)->status == SequenceStatus::preempted);
  CHECK(h.sched.sample("a", 0)->status == SequenceStatus::running);
  CHECK(h.sched.sample("b", 0)->status == SequenceStatus::running);
  CHECK(h.sched.sample("c", 0)->num_generated_tokens() > 0);  // kept for the recompute
  while (h.sched.stats().num_preemptions == 1) REQUIRE(h.step());
  CHECK(h.sched.sample("b", 0)->status == SequenceStatus::preempted);
  CHECK(h.sched.sample("a", 0)->status == SequenceStatus::running);
  h.run();
  check_against_reference(h, reqs);
  CHECK(h.sched.stats().num_preemptions >= 2);
  CHECK(h.kv.num_live_blocks() == 0);
}

TEST_CASE("under KV pressure, preempted requests produce the same tokens as unpreempted runs", "[scheduler]") {
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    std::mt19937 rng(6);
    Harness tight(scheduler_section(16, 64, "continuous", mode), 40, 4);
    auto reqs = submit_random(tight, rng, 40, 1, 30, 40);
    tight.run();
    check_against_reference(tight, reqs);
    const SchedulerStats s = tight.sched.stats();
    CHECK(s.num_preemptions > 0);
    CHECK(s.kv.num_seqs == 0);
    if (std::string(mode) == "offload") {
      CHECK(s.num_offloads > 0);
      CHECK(s.num_restores > 0);
      CHECK(tight.model.num_restored_slots > 0);
      CHECK(s.offload_seconds >= 0.0);
    } else {
      CHECK(s.num_offloads == 0);
      CHECK(tight.model.num_saved_slots == 0);
    }
  }
}

TEST_CASE("offload resumes without recomputing what was saved", "[scheduler]") {
  auto prefill_tokens = [](const char* mode) {
    std::mt19937 rng(7);
    Harness h(scheduler_section(16, 64, "continuous", mode), 40, 4);
    auto reqs = submit_random(h, rng, 40, 1, 30, 40);
    h.run();
    check_against_reference(h, reqs);
    return h.sched.stats();
  };
  const SchedulerStats recompute = prefill_tokens("recompute");
  const SchedulerStats offload = prefill_tokens("offload");
  REQUIRE(recompute.num_preemptions > 0);
  REQUIRE(offload.num_preemptions > 0);
  // Recompute re-prefills; offload only computes the prompts (plus the rare
  // fallback when a restore would race a KV copy: none happen without forks).
  CHECK(offload.num_prefill_tokens == offload.num_prompt_tokens);
  CHECK(recompute.num_prefill_tokens > recompute.num_prompt_tokens);
}

TEST_CASE("cancelling frees the KV at once and produces exactly one final event", "[scheduler]") {
  std::mt19937 rng(8);
  Harness h(scheduler_section(8, 64), 100, 4);
  Submitted a{"a", random_prompt(rng, 20), params(50)};
  h.sched.add_request("a", a.prompt, a.sp);
  for (int i = 0; i < 5; ++i) h.step();
  REQUIRE(h.kv.num_live_blocks() > 0);
  h.absorb(h.sched.abort_request("a"));
  CHECK(h.kv.num_live_blocks() == 0);
  CHECK(h.sched.stats().kv.num_seqs == 0);
  CHECK(h.out.at({"a", 0}).num_final_events == 1);
  CHECK(h.out.at({"a", 0}).reason == FinishReason::cancelled);
  CHECK(h.out.at({"a", 0}).tokens.size() == 5);
  CHECK(h.num_done.at("a") == 1);
  CHECK(h.sched.abort_request("a").empty());
  CHECK_FALSE(h.sched.has_work());

  SECTION("while its step is in flight: the step's output for it is dropped") {
    Submitted b{"b", random_prompt(rng, 20), params(50)};
    h.sched.add_request("b", b.prompt, b.sp);
    h.step();
    StepPlan plan = h.sched.schedule();
    const std::vector<int32_t> sampled = h.model.forward(plan);
    h.absorb(h.sched.abort_request("b"));
    CHECK(h.kv.num_live_blocks() == 0);
    h.absorb(h.sched.update_from_output(plan, sampled));
    CHECK(h.out.at({"b", 0}).num_final_events == 1);
    CHECK(h.out.at({"b", 0}).num_events_after_final == 0);
    CHECK(h.out.at({"b", 0}).tokens.size() == 1);
  }
  SECTION("before its prompt forks, all n samples end") {
    h.sched.add_request("n3", random_prompt(rng, 10), params(5, 3));
    h.absorb(h.sched.abort_request("n3"));
    for (int32_t i = 0; i < 3; ++i) CHECK(h.out.at({"n3", i}).num_final_events == 1);
    CHECK(h.num_done.at("n3") == 1);
  }
}

TEST_CASE("random cancellations and stop strings under load: all KV returned, every request answered once",
          "[scheduler]") {
  std::mt19937 rng(9);
  Harness h(scheduler_section(12, 48), 60, 4);
  std::vector<Submitted> reqs;
  std::set<std::string> cut;  // cancelled or stopped early
  std::uniform_int_distribution<int> coin(0, 9);
  for (int i = 0; i < 200 || h.sched.has_work(); ++i) {
    if (i < 200 && coin(rng) < 4) {
      std::string id = "q";
      id += std::to_string(i);
      const int32_t n = coin(rng) == 0 ? 2 : 1;
      reqs.push_back({id, random_prompt(rng, 1 + coin(rng) * 4), params(1 + coin(rng) * 5, n)});
      h.sched.add_request(id, reqs.back().prompt, reqs.back().sp);
    }
    if (!reqs.empty() && coin(rng) < 2) {
      const Submitted& victim = reqs[std::uniform_int_distribution<size_t>(0, reqs.size() - 1)(rng)];
      if (h.sched.has_request(victim.id)) {
        cut.insert(victim.id);
        if (coin(rng) < 5) h.absorb(h.sched.abort_request(victim.id));
        else h.absorb(h.sched.finish_request(victim.id, 0));
      }
    }
    h.step();
    REQUIRE(i < 5000);
  }
  CHECK(h.kv.num_live_blocks() == 0);
  CHECK(h.sched.stats().kv.num_seqs == 0);
  for (const Submitted& r : reqs) {
    INFO("request " << r.id);
    CHECK(h.num_done.at(r.id) == 1);
    for (int32_t i = 0; i < r.sp.n; ++i) {
      const Outcome& o = h.out.at({r.id, i});
      CHECK(o.num_final_events == 1);
      CHECK(o.num_events_after_final == 0);
      const Expected e = reference_output(r.prompt, r.sp, i, {}, h.limits.max_seq_len);
      if (cut.count(r.id)) {  // a prefix of the full answer
        REQUIRE(o.tokens.size() <= e.tokens.size());
        CHECK(std::equal(o.tokens.begin(), o.tokens.end(), e.tokens.begin()));
      } else {
        CHECK(o.tokens == e.tokens);
      }
    }
  }
}
