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
using namespace llmk::sched_test;

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
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(1);
  Harness h(scheduler_section(5, 24), 200, 4);
  h.overlap = overlap;
  auto reqs = submit_random(h, rng, 30, 1, 60, 20);
  h.run();
  if (overlap) {  // most steps were planned ahead, their decodes fed back
    CHECK(h.num_plans_ahead > int64_t(h.plans.size()) / 2);
    CHECK(h.num_fed_back_rows > 0);
  }
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
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    std::mt19937 rng(6);
    Harness tight(scheduler_section(16, 64, "continuous", mode), 40, 4);
    tight.overlap = overlap;
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
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  auto prefill_tokens = [overlap](const char* mode) {
    std::mt19937 rng(7);
    Harness h(scheduler_section(16, 64, "continuous", mode), 40, 4);
    h.overlap = overlap;
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
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO("preemption " << mode);
  std::mt19937 rng(9);
  Harness h(scheduler_section(12, 48, "continuous", mode), 60, 4);
  h.overlap = overlap;
  std::vector<Submitted> reqs;
  std::set<std::string> cut;  // cancelled or stopped early
  std::uniform_int_distribution<int> coin(0, 9);
  for (int i = 0; i < 200 || h.sched.has_work() || !h.in_flight.empty(); ++i) {
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

TEST_CASE("stop conditions: max_tokens, stop ids, EOS, ignore_eos and the context limit", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(10);
  const std::vector<int32_t> prompt = random_prompt(rng, 15);
  const std::vector<int32_t> free_run = reference_output(prompt, params(30), 0, {}, 4096).tokens;
  REQUIRE(free_run.size() == 30);
  auto run_one = [&, overlap](SamplingParams sp, std::vector<int32_t> eos, int32_t max_seq_len) {
    Harness h(scheduler_section(4, 64), 100, 4, max_seq_len, false, std::move(eos));
    h.overlap = overlap;
    h.sched.add_request("x", prompt, sp);
    h.run();
    CHECK(h.kv.num_live_blocks() == 0);
    CHECK(h.num_done.at("x") == 1);
    return h.out.at({"x", 0});
  };
  SECTION("max_tokens") {
    const Outcome o = run_one(params(1), {}, 4096);
    CHECK(o.tokens == std::vector<int32_t>{free_run[0]});
    CHECK(o.reason == FinishReason::length);
    CHECK(o.usage.completion_tokens == 1);
    CHECK(o.usage.prompt_tokens == 15);
  }
  SECTION("a stop token id ends the sample with that token, flagged") {
    SamplingParams sp = params(30);
    sp.stop_token_ids = {free_run[6]};
    const Outcome o = run_one(sp, {}, 4096);
    CHECK(o.tokens == std::vector<int32_t>(free_run.begin(), free_run.begin() + 7));
    CHECK(o.reason == FinishReason::stop);
    CHECK(o.stop_token_flagged);
  }
  SECTION("EOS stops unless ignore_eos") {
    const Outcome o = run_one(params(30), {free_run[3]}, 4096);
    CHECK(o.tokens == std::vector<int32_t>(free_run.begin(), free_run.begin() + 4));
    CHECK(o.reason == FinishReason::stop);
    SamplingParams sp = params(30);
    sp.ignore_eos = true;
    const Outcome ignored = run_one(sp, {free_run[3]}, 4096);
    CHECK(ignored.tokens == free_run);
    CHECK(ignored.reason == FinishReason::length);
    CHECK_FALSE(ignored.stop_token_flagged);
  }
  SECTION("the context limit") {
    const Outcome o = run_one(params(30), {}, 20);
    CHECK(o.tokens == std::vector<int32_t>(free_run.begin(), free_run.begin() + 5));
    CHECK(o.reason == FinishReason::length);
  }
}

TEST_CASE("add_request refuses bad requests and a full queue with named errors", "[scheduler]") {
  SchedulerSection cfg = scheduler_section(4, 64);
  cfg.max_queue = 2;
  Harness h(cfg, 100, 4, 32);
  auto code_of = [&](const std::string& id, std::vector<int32_t> prompt, SamplingParams sp) {
    try {
      h.sched.add_request(id, std::move(prompt), sp);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(id));
      return e.code();
    }
    return ErrorCode::internal;  // accepted
  };
  CHECK(code_of("empty", {}, params(4)) == ErrorCode::invalid_argument);
  CHECK(code_of("too-long", std::vector<int32_t>(32, 11), params(4)) == ErrorCode::invalid_argument);
  CHECK(code_of("fits", std::vector<int32_t>(31, 11), params(4)) == ErrorCode::internal);
  CHECK(code_of("fits", {11}, params(4)) == ErrorCode::invalid_argument);  // live duplicate
  CHECK(code_of("bad-n", {11}, params(4, 0)) == ErrorCode::invalid_argument);
  CHECK(code_of("huge-n", {11}, params(4, 5)) == ErrorCode::invalid_argument);
  CHECK(code_of("no-tokens", {11}, params(0)) == ErrorCode::invalid_argument);
  CHECK(code_of("second", {11}, params(4)) == ErrorCode::internal);
  CHECK(code_of("third", {11}, params(4)) == ErrorCode::overloaded);
  h.run();
  CHECK(code_of("third", {11}, params(4)) == ErrorCode::internal);
}

TEST_CASE("the constructor refuses unknown policies and offload without an offloader", "[scheduler]") {
  FakePagedAllocator kv(10, 4);
  SchedulerLimits limits{64, {}, 0};
  CHECK_THROWS_AS(Scheduler(scheduler_section(4, 64, "fifo"), limits, kv), Error);
  CHECK_THROWS_AS(Scheduler(scheduler_section(4, 64, "continuous", "swap"), limits, kv), Error);
  CHECK_THROWS_AS(Scheduler(scheduler_section(4, 64, "continuous", "offload"), limits, kv), Error);
  CHECK_NOTHROW(Scheduler(scheduler_section(4, 64, "static"), limits, kv));
}

TEST_CASE("n > 1 prefills the prompt once and forks into n independent samples", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(11);
  Harness h(scheduler_section(8, 16), 100, 4);
  h.overlap = overlap;
  Submitted r{"multi", random_prompt(rng, 37), params(12, 3)};
  h.sched.add_request(r.id, r.prompt, r.sp);
  h.run();
  check_against_reference(h, {r});
  CHECK(h.kv.num_forks == 2);
  CHECK(h.sched.stats().num_prefill_tokens == 37);
  CHECK(h.kv.usage().num_cow_copies == 2);  // 37 % 4 != 0: each child copies the shared last block
  CHECK(h.out.at({"multi", 0}).tokens != h.out.at({"multi", 1}).tokens);
  CHECK(h.out.at({"multi", 1}).tokens != h.out.at({"multi", 2}).tokens);
  CHECK(h.kv.num_live_blocks() == 0);
}

TEST_CASE("n > 1 under KV pressure and with one token each still answers every sample", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO("preemption " << mode);
  std::mt19937 rng(12);
  Harness h(scheduler_section(8, 32, "continuous", mode), 30, 4);
  h.overlap = overlap;
  std::vector<Submitted> reqs{{"one-token", random_prompt(rng, 9), params(1, 4)},
                              {"m1", random_prompt(rng, 10), params(20, 3)},
                              {"m2", random_prompt(rng, 7), params(20, 2)},
                              {"m3", random_prompt(rng, 13), params(20, 3)}};
  for (auto& r : reqs) h.sched.add_request(r.id, r.prompt, r.sp);
  h.run();
  check_against_reference(h, reqs);
  CHECK(h.sched.stats().num_preemptions > 0);
  CHECK(h.kv.num_live_blocks() == 0);
}

TEST_CASE("static batching admits nothing until its batch drains and counts padded slots", "[scheduler]") {
  std::mt19937 rng(13);
  const std::vector<int32_t> lens{5, 9, 3, 7, 6, 4}, gens{4, 10, 2, 7, 3, 5};
  auto make = [&](const char* policy) {
    auto h = std::make_unique<Harness>(scheduler_section(4, 64, policy), 200, 4);
    std::mt19937 prompts(14);
    std::vector<Submitted> reqs;
    for (size_t i = 0; i < lens.size(); ++i) {
      std::string id = "r";
      id += std::to_string(i);
      reqs.push_back({id, random_prompt(prompts, lens[i]), params(gens[i])});
      h->sched.add_request(id, reqs.back().prompt, reqs.back().sp);
    }
    h->run();
    check_against_reference(*h, reqs);
    return h;
  };
  auto first_and_last = [](const Harness& h, const std::string& id) {
    size_t first = SIZE_MAX, last = 0;
    for (size_t st = 0; st < h.plans.size(); ++st)
      for (const auto& rid : h.plans[st].request_ids)
        if (rid == id) first = std::min(first, st), last = std::max(last, st);
    return std::make_pair(first, last);
  };
  auto stat = make("static");
  size_t batch_end = 0;
  for (const char* id : {"r0", "r1", "r2", "r3"}) batch_end = std::max(batch_end, first_and_last(*stat, id).second);
  CHECK(first_and_last(*stat, "r4").first > batch_end);
  CHECK(first_and_last(*stat, "r5").first > batch_end);
  for (const auto& p : stat->plans) CHECK((p.num_decodes == 0 || p.num_prefill_chunks == 0));
  // Batch 1 (r0..r3): prompts 5 9 3 7, tokens 4 10 2 7; batch 2 (r4, r5): 6 4 and 3 5,
  // in a batch of 2. Padding = (longest - own) prompt + (longest - own) generation.
  const uint64_t padded = (4 + 0 + 6 + 2) + (6 + 0 + 8 + 3) + (0 + 2) + (2 + 0);
  CHECK(stat->sched.stats().num_padded_slots == padded);

  auto cont = make("continuous");
  CHECK(first_and_last(*cont, "r4").first < first_and_last(*cont, "r1").second);
  CHECK(cont->sched.stats().num_padded_slots == 0);
  CHECK(cont->sched.stats().num_steps < stat->sched.stats().num_steps);
}

TEST_CASE("a static batch computes a padding row for each member that ended early, until the batch drains",
          "[scheduler]") {
  std::mt19937 rng(31);
  Harness h(scheduler_section(4, 64, "static"), 200, 4);
  // One batch of four: generations of 2, 9, 4 and 9 tokens.
  const std::vector<int32_t> gens{2, 9, 4, 9};
  std::vector<Submitted> reqs;
  for (size_t i = 0; i < gens.size(); ++i) {
    reqs.push_back({"r" + std::to_string(i), random_prompt(rng, 6), params(gens[i])});
    h.sched.add_request(reqs.back().id, reqs.back().prompt, reqs.back().sp);
  }
  h.run();
  check_against_reference(h, reqs);
  // Every decode step of the batch has four rows: live members plus padding.
  int64_t padding = 0;
  for (const auto& p : h.plans) {
    if (p.num_prefill_chunks > 0) continue;
    CHECK(p.num_decodes + p.num_padding == 4);
    padding += p.num_padding;
  }
  // The first token of each comes with its prefill; the batch then decodes
  // 8 steps (to the longest, 9 tokens): r0 pads 7 of them, r2 pads 5.
  CHECK(padding == 7 + 5);
  CHECK(h.model.num_padding_rows == padding);
  CHECK(h.kv.num_live_blocks() == 0);  // the padding's KV is freed when the batch drains
  CHECK(h.sched.stats().kv.num_seqs == 0);
}

TEST_CASE("prefix-cache hits are not recomputed", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(15);
  Harness h(scheduler_section(4, 64), 100, 8, 4096, true);
  h.overlap = overlap;
  const std::vector<int32_t> shared = random_prompt(rng, 35);
  Submitted a{"a", shared, params(6)};
  std::vector<int32_t> tail = random_prompt(rng, 5);
  Submitted b{"b", std::vector<int32_t>(shared.begin(), shared.begin() + 33), params(6)};
  b.prompt.insert(b.prompt.end(), tail.begin(), tail.end());
  h.sched.add_request("a", a.prompt, a.sp);
  h.run();
  h.sched.add_request("b", b.prompt, b.sp);
  h.run();
  check_against_reference(h, {a, b});
  CHECK(h.out.at({"b", 0}).usage.cached_prompt_tokens == 32);  // four full blocks of 8
  const SchedulerStats s = h.sched.stats();
  CHECK(s.num_cached_prompt_tokens == 32);
  CHECK(s.num_prefill_tokens == 35 + (38 - 32));
  CHECK(s.num_prompt_tokens == 35 + 38);
}

TEST_CASE("a sequence that cannot fit even alone ends with an error while others proceed", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(16);
  Harness h(scheduler_section(4, 64), 4, 4);  // 16 slots
  h.overlap = overlap;
  std::vector<Submitted> ok{{"small", random_prompt(rng, 3), params(5)}};
  h.sched.add_request("too-long-prompt", random_prompt(rng, 20), params(4));
  const std::vector<int32_t> grows = random_prompt(rng, 10);
  h.sched.add_request("grows-too-long", grows, params(20));
  h.sched.add_request("small", ok[0].prompt, ok[0].sp);
  h.run();
  check_against_reference(h, ok);
  const Outcome& a = h.out.at({"too-long-prompt", 0});
  CHECK(a.reason == FinishReason::error);
  CHECK(a.tokens.empty());
  CHECK_THAT(a.error, Catch::Contains("do not fit"));
  const Outcome& b = h.out.at({"grows-too-long", 0});
  CHECK(b.reason == FinishReason::error);
  // Feeding token 16 (position 15) fills the 16 slots and yields token 17,
  // whose own K/V has no slot: 7 generated tokens, then the error.
  REQUIRE(b.tokens.size() == 7);
  const Expected full = reference_output(grows, params(20), 0, {}, h.limits.max_seq_len);
  CHECK(std::equal(b.tokens.begin(), b.tokens.end(), full.tokens.begin()));
  CHECK(b.num_final_events == 1);
  CHECK(h.kv.num_live_blocks() == 0);
  CHECK(h.sched.stats().num_preemptions >= 1);  // "small" made room first, then came back
}

TEST_CASE("timings follow the injected clock", "[scheduler]") {
  const bool overlap = GENERATE(false, true);
  INFO("overlap " << overlap);
  std::mt19937 rng(17);
  Harness h(scheduler_section(1, 64), 100, 4);
  h.overlap = overlap;
  h.sched.add_request("first", random_prompt(rng, 4), params(3));
  h.sched.add_request("second", random_prompt(rng, 4), params(2));
  h.run();  // each step advances the clock by 10 ms after the forward
  const Timings& t1 = h.out.at({"first", 0}).timings;
  CHECK(t1.queue_s == Approx(0.0));
  CHECK(t1.time_to_first_token_s == Approx(0.010));
  CHECK(t1.e2e_s == Approx(0.030));
  REQUIRE(t1.token_times_s.size() == 3);
  CHECK(t1.token_times_s[0] == Approx(0.010));
  CHECK(t1.token_times_s[1] == Approx(0.020));
  CHECK(t1.token_times_s[2] == Approx(0.030));
  const Timings& t2 = h.out.at({"second", 0}).timings;  // waits for the only sequence slot
  CHECK(t2.queue_s == Approx(0.030));
  CHECK(t2.time_to_first_token_s == Approx(0.040));
  CHECK(t2.e2e_s == Approx(0.050));
}

TEST_CASE("a failed step ends its sequences with an error and returns their KV", "[scheduler]") {
  std::mt19937 rng(18);
  Harness h(scheduler_section(4, 64), 100, 4);
  h.sched.add_request("a", random_prompt(rng, 6), params(5));
  h.sched.add_request("b", random_prompt(rng, 6), params(5));
  StepPlan plan = h.sched.schedule();
  CHECK_THROWS_AS(h.sched.schedule(), Error);  // one plan in flight at a time
  h.absorb(h.sched.fail_step(plan, "executor failed"));
  CHECK(h.out.at({"a", 0}).reason == FinishReason::error);
  CHECK(h.out.at({"b", 0}).error == "executor failed");
  CHECK(h.kv.num_live_blocks() == 0);
  CHECK_FALSE(h.sched.has_work());
  CHECK(h.sched.schedule().empty());
}

TEST_CASE("a relocating contiguous allocator: copies, refused forks and offload restores stay correct",
          "[scheduler]") {
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  const bool overlap = GENERATE(false, true);
  INFO("preemption " << mode << ", overlap " << overlap);
  std::mt19937 rng(19);
  FakeContiguousAllocator kv(160, 128);
  FakeModel model(160);
  TimePoint t{};
  SchedulerLimits limits{128, {}, 0};
  Scheduler sched(scheduler_section(8, 32, "continuous", mode), limits, kv,
                  SchedulerOptions{.clock = [&t] { return t; }, .offloader = &model});
  std::vector<Submitted> reqs;
  for (int i = 0; i < 30; ++i) {
    std::string id = "c";
    id += std::to_string(i);
    reqs.push_back({id, random_prompt(rng, 1 + i % 17), params(5 + (i * 7) % 30, i % 5 == 0 ? 2 : 1)});
    sched.add_request(id, reqs.back().prompt, reqs.back().sp);
  }
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> tokens;
  std::map<std::string, int> done;
  auto absorb = [&](const std::vector<TokenEvent>& events) {
    for (const TokenEvent& e : events) {
      if (e.token_id) tokens[{e.request_id, e.index}].push_back(*e.token_id);
      CHECK(e.finish_reason != FinishReason::error);
      if (e.request_done) done[e.request_id] += 1;
    }
  };
  // Steps as the scheduler actor sends them; with overlap the device
  // computes the plan made ahead before the host applies the one before it.
  std::deque<std::pair<StepPlan, std::vector<int32_t>>> sent;
  std::vector<int32_t> last;  // the device's last sampled ids
  for (int step = 0; sched.has_work() || !sent.empty(); ++step) {
    REQUIRE(step < 10000);
    if (sent.empty()) {
      StepPlan plan = sched.schedule();
      absorb(plan.events);
      REQUIRE_FALSE(plan.empty());
      last = model.forward(plan, &last);
      sent.emplace_back(std::move(plan), last);
    }
    if (overlap && sent.size() == 1) {
      StepPlan ahead = sched.schedule_ahead(sent.back().first);
      if (!ahead.empty()) {
        last = model.forward(ahead, &last);
        sent.emplace_back(std::move(ahead), last);
      }
    }
    auto [plan, sampled] = std::move(sent.front());
    sent.pop_front();
    absorb(sched.update_from_output(plan, sampled));
  }
  for (const Submitted& r : reqs) {
    CHECK(done[r.id] == 1);
    for (int32_t i = 0; i < r.sp.n; ++i)
      CHECK(tokens[{r.id, i}] == reference_output(r.prompt, r.sp, i, {}, 128).tokens);
  }
  CHECK(kv.num_relocations > 0);
  CHECK(sched.stats().num_preemptions > 0);
  if (mode == "offload") CHECK(sched.stats().num_offload_recomputes > 0);
  CHECK(kv.usage().num_seqs == 0);
}

TEST_CASE("a static batch takes max_num_seqs members even when their prompts exceed one step's token budget",
          "[scheduler]") {
  // 6 prompts of 20 tokens, a budget of 32 tokens per step, batches of 4:
  // the batch is formed whole, prefilled over several steps, then decoded.
  Harness h(scheduler_section(4, 32, "static"), 400, 4);
  std::mt19937 rng(21);
  std::vector<Submitted> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back({"r" + std::to_string(i), random_prompt(rng, 20), params(5)});
    h.sched.add_request(reqs.back().id, reqs.back().prompt, reqs.back().sp);
  }
  h.run();
  check_against_reference(h, reqs);
  size_t max_decodes = 0;
  for (const auto& p : h.plans) {
    CHECK(p.num_tokens <= 32);
    max_decodes = std::max(max_decodes, static_cast<size_t>(p.num_decodes));
  }
  CHECK(max_decodes == 4);
}

TEST_CASE("a step planned ahead feeds back the token in flight, and a row whose sequence ended is discarded",
          "[scheduler][overlap]") {
  std::mt19937 rng(20);
  const std::vector<int32_t> prompt = random_prompt(rng, 6);
  const std::vector<int32_t> free_run = reference_output(prompt, params(30), 0, {}, 4096).tokens;
  // EOS is the third token: the sequence ends at step 3, while step 4
  // (planned ahead of it) already holds its next decode.
  Harness h(scheduler_section(4, 64), 100, 4, 4096, false, {free_run[2]});
  h.sched.add_request("x", prompt, params(30));

  StepPlan first = h.sched.schedule();
  REQUIRE(first.batch.num_tokens() == 6);
  CHECK(first.batch.fed_back.empty());
  StepPlan second = h.sched.schedule_ahead(first);
  REQUIRE(second.batch.num_tokens() == 1);
  REQUIRE(second.batch.fed_back.size() == 1);
  CHECK(second.batch.fed_back[0].row == 0);
  CHECK(second.batch.fed_back[0].previous_row == 0);
  CHECK(second.batch.token_ids[0] == 0);        // 0 until the executor puts the sampled id in
  CHECK(second.batch.positions[0] == 6);
  CHECK(second.logits[0].num_generated == 1);   // the sampler's counter: one token before this row's
  CHECK(h.sched.schedule_ahead(second).empty());  // one step ahead at most
  CHECK_THROWS_AS(h.sched.schedule(), Error);     // and no full plan while steps are in flight
  CHECK_THROWS_AS(h.sched.update_from_output(second, {1}), Error);  // updates come in step order

  const std::vector<int32_t> sampled1 = h.model.forward(first);
  const std::vector<int32_t> sampled2 = h.model.forward(second, &sampled1);
  h.absorb(h.sched.update_from_output(first, sampled1));
  StepPlan third = h.sched.schedule_ahead(second);
  REQUIRE(third.batch.fed_back.size() == 1);
  const std::vector<int32_t> sampled3 = h.model.forward(third, &sampled2);
  h.absorb(h.sched.update_from_output(second, sampled2));
  StepPlan fourth = h.sched.schedule_ahead(third);  // planned before step 3's EOS is known
  REQUIRE(fourth.batch.num_tokens() == 1);
  const std::vector<int32_t> sampled4 = h.model.forward(fourth, &sampled3);
  h.absorb(h.sched.update_from_output(third, sampled3));  // EOS: the sequence ends here
  CHECK(h.sched.schedule_ahead(fourth).empty());
  CHECK(h.kv.num_live_blocks() == 0);                    // its KV is free although step 4 ran over it
  h.absorb(h.sched.update_from_output(fourth, sampled4));  // the discarded row: no event
  const Outcome& o = h.out.at({"x", 0});
  CHECK(o.tokens == std::vector<int32_t>(free_run.begin(), free_run.begin() + 3));
  CHECK(o.reason == FinishReason::stop);
  CHECK(o.stop_token_flagged);
  CHECK(o.usage.completion_tokens == 3);  // the pending token never counts
  CHECK(o.num_final_events == 1);
  CHECK(o.num_events_after_final == 0);
  CHECK(h.sched.stats().num_generated_tokens == 3);
  CHECK_FALSE(h.sched.has_work());
}

TEST_CASE("schedule_ahead plans nothing, changing nothing, where only a full schedule() may decide",
          "[scheduler][overlap]") {
  std::mt19937 rng(21);
  SECTION("a step in flight that forks samples") {
    Harness h(scheduler_section(8, 64), 100, 4);
    h.sched.add_request("n3", random_prompt(rng, 5), params(4, 3));
    StepPlan plan = h.sched.schedule();
    REQUIRE(plan.logits.size() == 3);
    CHECK(h.sched.schedule_ahead(plan).empty());
  }
  SECTION("the static policy") {
    Harness h(scheduler_section(8, 64, "static"), 100, 4);
    h.sched.add_request("s", random_prompt(rng, 5), params(4));
    StepPlan plan = h.sched.schedule();
    CHECK(h.sched.schedule_ahead(plan).empty());
  }
  SECTION("a decode that would need a preemption") {
    // 3 blocks of 4: two 4-token prompts take a block each; a's decode takes
    // the third, and b's would need a fourth, which only a preemption frees.
    Harness h(scheduler_section(8, 64), 3, 4);
    const Submitted a{"a", random_prompt(rng, 4), params(6)};
    const Submitted b{"b", random_prompt(rng, 4), params(6)};
    h.sched.add_request(a.id, a.prompt, a.sp);
    h.sched.add_request(b.id, b.prompt, b.sp);
    StepPlan p1 = h.sched.schedule();
    REQUIRE(p1.seqs.size() == 2);
    CHECK(h.sched.schedule_ahead(p1).empty());
    CHECK(h.sched.stats().num_preemptions == 0);
    CHECK(h.sched.sample("a", 0)->num_tokens() == 4);  // no pending token left behind
    CHECK(h.sched.sample("b", 0)->num_tokens() == 4);
    h.absorb(h.sched.update_from_output(p1, h.model.forward(p1)));
    // The full schedule() preempts b as it would without overlap; a's KV,
    // grown by the plan given up, serves its decode.
    StepPlan p2 = h.sched.schedule();
    CHECK(h.sched.stats().num_preemptions == 1);
    REQUIRE(p2.seqs.size() == 1);
    CHECK(p2.seqs[0].seq_id == h.sched.sample("a", 0)->seq_id);
    h.absorb(h.sched.update_from_output(p2, h.model.forward(p2)));
    h.overlap = true;
    h.run();
    check_against_reference(h, {a, b});
    CHECK(h.kv.num_live_blocks() == 0);
  }
}

TEST_CASE("pipelined steps are disjoint, spread the running sequences evenly, and give the reference outputs",
          "[scheduler][pipeline]") {
  const int32_t stages = GENERATE(2, 3, 4);
  INFO(stages << " steps in flight");
  std::mt19937 rng(21);
  Harness h(scheduler_section(16, 64), 400, 4, 4096, false, {}, stages);
  auto reqs = submit_random(h, rng, 30, 1, 40, 30);
  h.run();  // the harness fails any plan that shares a sequence with a step in flight
  check_against_reference(h, reqs);
  CHECK(h.peak_in_flight == static_cast<size_t>(stages));
  CHECK(h.sched.stats().peak_steps_in_flight == static_cast<uint64_t>(stages));
  CHECK(h.kv.num_live_blocks() == 0);

  // Sixteen sequences decoding: each step takes ceil(16 / stages) of them.
  Harness even(scheduler_section(16, 64), 400, 4, 4096, false, {}, stages);
  std::vector<Submitted> many;
  for (int i = 0; i < 16; ++i) {
    Submitted r{"d" + std::to_string(i), random_prompt(rng, 3), params(40)};
    even.sched.add_request(r.id, r.prompt, r.sp);
    many.push_back(r);
  }
  for (int i = 0; i < 12; ++i) REQUIRE(even.step());
  const int32_t per_step = (16 + stages - 1) / stages;
  for (size_t i = 4; i < 12; ++i) {
    INFO("step " << i);
    CHECK(even.plans[i].num_decodes <= per_step);
    CHECK(even.plans[i].num_decodes >= 16 - (stages - 1) * per_step);
  }
  even.run();
  check_against_reference(even, many);
}

TEST_CASE("pipelined steps under KV pressure: no preemption, offload or restore beside steps in flight",
          "[scheduler][pipeline]") {
  for (const char* mode : {"recompute", "offload"}) {
    INFO("preemption " << mode);
    std::mt19937 rng(22);
    // The fake model fails any KV save or restore while a step is in flight.
    Harness tight(scheduler_section(16, 64, "continuous", mode), 40, 4, 4096, false, {}, 2);
    auto reqs = submit_random(tight, rng, 40, 1, 30, 40);
    tight.run();
    check_against_reference(tight, reqs);
    const SchedulerStats s = tight.sched.stats();
    CHECK(s.num_preemptions > 0);
    CHECK(s.peak_steps_in_flight == 2);
    CHECK(s.kv.num_seqs == 0);
    if (std::string(mode) == "offload") CHECK(s.num_restores > 0);
  }
}

TEST_CASE("pipelined steps with prefix caching, forks and cancels give the reference outputs",
          "[scheduler][pipeline]") {
  std::mt19937 rng(23);
  Harness h(scheduler_section(8, 32), 120, 4, 4096, /*prefix_caching=*/true, {}, 3);
  const std::vector<int32_t> system = random_prompt(rng, 12);
  std::vector<Submitted> reqs;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt = system;
    const std::vector<int32_t> tail = random_prompt(rng, 1 + i % 5);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    Submitted r{"p" + std::to_string(i), prompt, params(12 + i, i % 3 == 0 ? 3 : 1)};
    h.sched.add_request(r.id, r.prompt, r.sp);
    reqs.push_back(r);
  }
  h.sched.add_request("gone", random_prompt(rng, 9), params(50));
  for (int i = 0; i < 5; ++i) REQUIRE(h.step());
  h.absorb(h.sched.abort_request("gone"));  // its step may still be in flight
  h.run();
  check_against_reference(h, reqs);
  CHECK(h.out.at({"gone", 0}).reason == FinishReason::cancelled);
  CHECK(h.sched.stats().num_cached_prompt_tokens > 0);
  CHECK(h.kv.num_live_blocks() == 0);
}
