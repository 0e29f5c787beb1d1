// Speculative decoding without a model: prompt lookup's drafts against
// hand-computed expectations, the greedy acceptance rule, the config's
// refusals, and the Scheduler's verification rows and rollback over the
// real allocator plugins with the fake model of scheduler_fakes.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "core/cpu_sampler.hpp"
#include "core/device.hpp"
#include "core/sampler.hpp"
#include "core/plugin_loader.hpp"
#include "core/speculation.hpp"
#include "scheduler_fakes.hpp"
#include "support/speculation_cases.hpp"

using namespace llmk;
using namespace llmk::sched_test;
using llmk::test::chi_square;
using llmk::test::target_distribution;

namespace {

std::vector<int32_t> drafts_of(const NgramProposer& p, const std::vector<int32_t>& tokens, int32_t k) {
  std::vector<int32_t> out;
  p.propose(tokens, k, out);
  return out;
}

SpeculativeSection ngram(uint32_t k, uint32_t min_n, uint32_t max_n) {
  SpeculativeSection s;
  s.method = "ngram";
  s.num_tokens = k;
  s.prompt_lookup_min = min_n;
  s.prompt_lookup_max = max_n;
  return s;
}

SchedulerOptions ngram_options() {
  SchedulerOptions options;
  options.speculative = ngram(3, 1, 2);
  return options;
}

// A scheduler of 4 sequences and 64 batched tokens, context 128, drafting up
// to 3 tokens by prompt lookup (suffixes of 1 or 2), over `allocator` with
// 512 slots in blocks of 8 (prefix caching as asked).
struct NgramScheduler {
  explicit NgramScheduler(const char* allocator, std::vector<int32_t> eos_ids = {}, bool prefix_caching = false)
      : kv(registry.load(allocator, LLMK_PLUGIN_KV_ALLOCATOR),
           llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), 512, 8, 128, prefix_caching ? 1u : 0u, "{}",
                                  nullptr, nullptr}),
        sched(scheduler_section(4, 64), SchedulerLimits{128, std::move(eos_ids), 0}, kv, ngram_options()) {}
  PluginRegistry registry;
  KvAllocatorImpl kv;
  Scheduler sched;
};

// A model whose next token depends on the last two tokens only, over five
// ids: its output soon repeats, so prompt lookup's drafts are often right
// (and sometimes not).
int32_t bigram_next(const std::vector<int32_t>& context, int32_t sample_index) {
  const size_t n = context.size();
  const uint64_t a = static_cast<uint32_t>(context[n - 1]), b = n > 1 ? static_cast<uint32_t>(context[n - 2]) : 7u;
  const uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ static_cast<uint64_t>(sample_index);
  return 10 + static_cast<int32_t>((h >> 29) % 5);
}

std::vector<int32_t> bigram_reference(std::vector<int32_t> context, const SamplingParams& sp, int32_t index,
                                      int32_t max_seq_len) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < sp.max_tokens && static_cast<int32_t>(context.size()) < max_seq_len) {
    const int32_t t = bigram_next(context, index);
    context.push_back(t);
    out.push_back(t);
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), t) != sp.stop_token_ids.end()) break;
  }
  return out;
}

}  // namespace

TEST_CASE("prompt lookup drafts what followed the latest earlier match of the longest suffix it finds",
          "[speculation]") {
  const NgramProposer p24(2, 4);
  // n = 4: [4,1,2,3] occurs nowhere earlier; n = 3: [1,2,3] at 0, followed by 4, 1, 2.
  CHECK(drafts_of(p24, {1, 2, 3, 4, 1, 2, 3}, 3) == std::vector<int32_t>{4, 1, 2});
  CHECK(drafts_of(p24, {1, 2, 3, 4, 1, 2, 3}, 1) == std::vector<int32_t>{4});
  // [5,6] occurs at 0 and 3: the later one (followed by 8, 5) wins over the first (7, 5).
  const NgramProposer p22(2, 2);
  CHECK(drafts_of(p22, {5, 6, 7, 5, 6, 8, 5, 6}, 2) == std::vector<int32_t>{8, 5});
  // Only one token follows the match before the sequence ends.
  const NgramProposer p12(1, 2);
  CHECK(drafts_of(p12, {9, 9, 9}, 4) == std::vector<int32_t>{9});
  // No 2-gram match ([9,5]); the 1-gram [5] at 1 is followed by 6, 9.
  CHECK(drafts_of(p12, {4, 5, 6, 9, 5}, 2) == std::vector<int32_t>{6, 9});
  CHECK(drafts_of(p22, {4, 5, 6, 9, 5}, 2).empty());  // prompt_lookup_min 2: no 1-gram
  CHECK(drafts_of(p12, {1, 2, 3, 4}, 3).empty());
  CHECK(drafts_of(p12, {1, 2, 1}, 0).empty());
  CHECK(drafts_of(p12, {7}, 3).empty());
  CHECK_THROWS_WITH(NgramProposer(3, 2), Catch::Contains("prompt_lookup_min 3"));
  CHECK_THROWS_WITH(NgramProposer(0, 2), Catch::Contains("1 <= min <= max"));
}

TEST_CASE("greedy verification accepts drafts while they equal the rows' choices", "[speculation]") {
  const std::vector<int32_t> drafts{4, 1, 2};
  CHECK(num_accepted_greedy(drafts, std::vector<int32_t>{4, 1, 7, 0}) == 2);
  CHECK(num_accepted_greedy(drafts, std::vector<int32_t>{5, 1, 2, 0}) == 0);
  CHECK(num_accepted_greedy(drafts, std::vector<int32_t>{4, 1, 2, 9}) == 3);
  CHECK(num_accepted_greedy({}, std::vector<int32_t>{3}) == 0);
}

TEST_CASE("speculative settings are validated once, naming the keys", "[speculation][config]") {
  auto refused = [](const std::vector<std::string>& overrides) {
    try {
      load_config({}, overrides);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused({"speculative.method=ngram"}) == "accepted");
  CHECK_THAT(refused({"speculative.method=eagle"}), Catch::Contains("speculative.method") && Catch::Contains("eagle"));
  CHECK_THAT(refused({"speculative.num_tokens=0"}), Catch::Contains("speculative.num_tokens"));
  CHECK_THAT(refused({"speculative.prompt_lookup_min=5"}), Catch::Contains("speculative.prompt_lookup_min"));
  CHECK_THAT(refused({"speculative.method=ngram", "scheduler.policy=static"}),
             Catch::Contains("speculative.method") && Catch::Contains("scheduler.policy"));
  CHECK_THAT(refused({"speculative.method=ngram", "parallel.pipeline=2"}),
             Catch::Contains("speculative.method") && Catch::Contains("parallel.steps_in_flight"));
  CHECK(refused({"speculative.method=ngram", "parallel.pipeline=2", "parallel.steps_in_flight=1"}) == "accepted");
  // Prompt lookup proposes with certainty: no q to draw drafts from.
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.draft_sampling=sampled"}),
             Catch::Contains("speculative.draft_sampling") && Catch::Contains("speculative.method draft") &&
                 Catch::Contains("ngram"));
  if (has_executor("cuda"))  // built here: the CUDA executor verifies drafts too
    CHECK(refused({"speculative.method=ngram", "executor.device=cuda"}) == "accepted");
  CHECK(load_config({}, {}).speculative.method == "none");
}

TEST_CASE("a scheduler refuses speculation over an allocator that cannot roll back", "[speculation][scheduler]") {
  FakePagedAllocator kv(64, 8);  // no truncate_seq
  SchedulerOptions options;
  options.speculative = ngram(3, 1, 2);
  CHECK_THROWS_WITH(Scheduler(scheduler_section(4, 64), SchedulerLimits{256, {}, 0}, kv, options),
                    Catch::Contains("speculative.method") && Catch::Contains("truncate_seq"));
}

TEST_CASE("a verification step has a row and logits per draft; its update emits the accepted ids and rolls back",
          "[speculation][scheduler]") {
  NgramScheduler harness("kv.paged", {7}, true);  // EOS: 7
  Scheduler& sched = harness.sched;
  const KvAllocatorImpl& kv = harness.kv;
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 10;
  sched.add_request("r", {1, 2, 3, 1, 2}, sp);

  StepPlan prefill = sched.schedule();
  REQUIRE(prefill.batch.num_logits() == 1);
  sched.update_from_output(prefill, {3});  // tokens: 1 2 3 1 2 3

  // [2,3] last occurred at 1, followed by 1, 2, 3: three drafts after the decode row.
  StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == 1);
  CHECK(step.seqs[0].num_draft_tokens == 3);
  CHECK(step.seqs[0].num_new_tokens == 4);
  CHECK(step.batch.token_ids == std::vector<int32_t>{3, 1, 2, 3});
  CHECK(step.batch.positions == std::vector<int32_t>{5, 6, 7, 8});
  CHECK(step.batch.context_lens == std::vector<int32_t>{9});
  CHECK(step.batch.logits_rows == std::vector<int32_t>{0, 1, 2, 3});
  REQUIRE(step.logits.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(step.logits[size_t(i)].num_generated == 1 + i);
  CHECK(step.logits[0].draft_token == 1);
  CHECK(step.logits[2].draft_token == 3);
  CHECK(step.logits[3].draft_token == -1);
  CHECK(kv.usage().used_slots == 9);

  // The model agrees on 1 and 2, then picks 1 where 3 was drafted.
  const auto events = sched.update_from_output(step, {1, 2, 1, 4});
  REQUIRE(events.size() == 3);
  for (int j = 0; j < 3; ++j) {
    CHECK(events[size_t(j)].token_id == std::vector<int32_t>{1, 2, 1}[size_t(j)]);
    CHECK(events[size_t(j)].logits_row == j);
  }
  const Sequence* seq = sched.sample("r", 0);
  REQUIRE(seq != nullptr);
  CHECK(seq->tokens == std::vector<int32_t>{1, 2, 3, 1, 2, 3, 1, 2, 1});
  CHECK(seq->num_computed_tokens == 8);
  CHECK(kv.usage().used_slots == 8);  // the rejected draft's slot is given back
  const SchedulerStats s = sched.stats();
  CHECK(s.num_spec_drafts == 1);
  CHECK(s.num_spec_draft_tokens == 3);
  CHECK(s.num_spec_accepted_tokens == 2);
  CHECK(s.num_generated_tokens == 4);

  // [2,1] occurs nowhere earlier; [1] last at 6, followed by 2, 1. The
  // model accepts 2, then chooses EOS, which ends the request mid-step.
  StepPlan next = sched.schedule();
  REQUIRE(next.seqs.size() == 1);
  CHECK(next.batch.token_ids == std::vector<int32_t>{1, 2, 1});
  const auto end = sched.update_from_output(next, {2, 7, 5});
  REQUIRE(end.size() == 2);
  CHECK(end[0].token_id == 2);
  CHECK_FALSE(end[0].finished);
  CHECK(end[1].token_id == 7);
  CHECK(end[1].finished);
  CHECK(end[1].finish_reason == FinishReason::stop);
  CHECK(end[1].logits_row == 1);
  CHECK(kv.usage().num_seqs == 0);
  CHECK(sched.stats().num_spec_accepted_tokens == 3);
}

TEST_CASE("with speculation, every allocator gives the reference tokens under preemption, chunked prefill and "
          "forked samples",
          "[speculation][scheduler][plugins]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO(plugin << ", preemption " << mode);
  const uint32_t max_seq_len = 96, num_slots = 4 * max_seq_len;  // tight: preemption under every allocator but contiguous
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, 8, max_seq_len, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  FakeModel model(num_slots);
  model.next_token = bigram_next;
  SchedulerOptions options{[] { return TimePoint{}; }, &model};
  options.speculative = ngram(4, 1, 3);
  Scheduler sched(scheduler_section(12, 40, "continuous", mode), SchedulerLimits{int32_t(max_seq_len), {}, 0}, kv,
                  options);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(10, 14), len(1, 40), gen(1, 50), pick(0, 9);
  struct Job {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams sp;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 60; ++i) {
    Job j{"j" + std::to_string(i), {}, {}};
    for (int32_t k = len(rng); k > 0; --k) j.prompt.push_back(tok(rng));
    j.sp.max_tokens = gen(rng);
    j.sp.temperature = pick(rng) < 2 ? 0.7f : 0.0f;  // the fake model's ids ignore it
    j.sp.n = pick(rng) == 0 ? 2 : 1;                  // n > 1: its samples draft once forked
    if (pick(rng) == 0) j.sp.stop_token_ids = {12};
    jobs.push_back(std::move(j));
  }
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> tokens;
  std::map<std::string, int> done;
  size_t next_job = 0;
  for (int step = 0; next_job < jobs.size() || sched.has_work(); ++step) {
    REQUIRE(step < 20000);
    for (int k = 0; k < 3 && next_job < jobs.size(); ++k, ++next_job)
      sched.add_request(jobs[next_job].id, jobs[next_job].prompt, jobs[next_job].sp);
    StepPlan plan = sched.schedule();
    std::vector<TokenEvent> events = plan.events;
    if (!plan.empty()) {
      const auto more = sched.update_from_output(plan, model.forward(plan));
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
      CHECK(tokens[{j.id, i}] == bigram_reference(j.prompt, j.sp, i, int32_t(max_seq_len)));
  }
  const SchedulerStats s = sched.stats();
  CHECK(s.num_spec_drafts > 0);
  CHECK(s.num_spec_accepted_tokens > 0);
  CHECK(s.num_spec_accepted_tokens < s.num_spec_draft_tokens);  // some drafts were rolled back
  if (plugin != "kv.contiguous") CHECK(s.num_preemptions > 0);
  CHECK(s.kv.num_seqs == 0);
  CHECK(s.kv.used_slots == 0);
}

TEST_CASE("a sampled row verifying a draft keeps the target distribution: 10^5 draws pass chi-square at p > 0.001",
          "[speculation][sampler]") {
  using namespace llmk::test;
  const int32_t vocab = kRejectionVocab;
  const std::vector<float> raw = rejection_logits();
  const std::vector<int32_t> history = rejection_history();
  const std::vector<int32_t> prompt;
  Sampler sampler(vocab, 1);
  const int64_t draws = kRejectionDraws;
  for (const RejectionCase& c : kRejectionCases) {
    const SamplingParams p = c.params();
    const std::vector<double> target = target_distribution(raw, p, history);
    for (const int32_t draft : rejection_drafts(target)) {
      INFO(c.name << ", draft " << draft << " of probability " << target[size_t(draft)]);
      std::vector<int64_t> counts(vocab, 0);
      int64_t accepted = 0;
      SamplerRow row;
      row.logits = raw.data();
      row.params = &p;
      row.prompt_ids = prompt;
      row.generated_ids = history;
      row.draft_token = draft;
      for (int64_t d = 0; d < draws; ++d) {
        row.seed = uint64_t(d) * 7919u + 1;
        const int32_t t = sampler.sample_one(row).token_id;
        REQUIRE((t >= 0 && t < vocab));
        ++counts[size_t(t)];
        accepted += t == draft;
      }
      const auto [stat, critical] = chi_square(counts, target, draws);
      CHECK(stat < critical);
      if (getenv("LLMK_PRINT_CHI2")) std::printf("%s, draft p %.3f: chi-square %.1f < %.1f\n", c.name, target[size_t(draft)], stat, critical);
      // The draft is accepted with its own probability: 4.5 standard deviations.
      const double pd = target[size_t(draft)];
      const double sd = std::sqrt(pd * (1 - pd) / double(draws));
      CHECK(std::abs(double(accepted) / double(draws) - pd) <= 4.5 * sd + 1e-9);
    }
  }
}

TEST_CASE("the draw rule the verification shares with plain sampling is checked by the same test",
          "[speculation][sampler]") {
  // Without a draft the same statistic holds (and a wrong target fails it).
  const int32_t vocab = 12;
  std::vector<float> raw(vocab);
  for (int32_t i = 0; i < vocab; ++i) raw[size_t(i)] = 0.3f * float(i % 5) - 0.1f * float(i);
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  const std::vector<int32_t> none;
  const std::vector<double> target = target_distribution(raw, p, none);
  Sampler sampler(vocab, 1);
  std::vector<int64_t> counts(vocab, 0);
  const int64_t draws = 100000;
  SamplerRow row;
  row.logits = raw.data();
  row.params = &p;
  for (int64_t d = 0; d < draws; ++d) {
    row.seed = uint64_t(d) * 7919u + 1;
    ++counts[size_t(sampler.sample_one(row).token_id)];
  }
  const auto [stat, critical] = chi_square(counts, target, draws);
  CHECK(stat < critical);
  SamplingParams hotter = p;
  hotter.temperature = 0.8f;
  const auto [wrong, critical_wrong] = chi_square(counts, target_distribution(raw, hotter, none), draws);
  CHECK(wrong > critical_wrong);
}

TEST_CASE("the CPU sampler's verification rows read the drafts fed before them as history, and drop rejected ids",
          "[speculation][sampler]") {
  // Penalties make row 1 depend on its history: base + the draft of row 0.
  const int32_t vocab = 8;
  std::vector<float> logits(2 * vocab);
  for (int32_t i = 0; i < 2 * vocab; ++i) logits[size_t(i)] = 0.25f * float((i * 5) % 7) - 0.5f;
  SamplingParams p;
  p.temperature = 0.9f;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.4f;
  p.logprobs = vocab - 1;
  CpuSampler sampler(vocab, 1);
  sampler.open(7, p, 11, {}, 1);
  LogitsView one{Device::cpu, logits.data(), 1, vocab, vocab, {}, {}};
  std::vector<SampledToken> out(2);
  sampler.sample(one, std::vector<DeviceSampler::Row>{{7, 0, 0, -1}}, out);  // history: [t0]
  const int32_t t0 = out[0].token_id;
  const int32_t draft = (t0 + 3) % vocab;
  LogitsView two{Device::cpu, logits.data(), 2, vocab, vocab, {}, {}};
  sampler.sample(two, std::vector<DeviceSampler::Row>{{7, 0, 1, draft}, {7, 0, 2, -1}}, out);

  // Row 1 as the plain Sampler sees it with history [t0, draft].
  Sampler plain(vocab, 1);
  const std::vector<int32_t> history{t0, draft};
  SamplerRow row;
  row.logits = logits.data() + vocab;
  row.params = &p;
  row.generated_ids = history;
  row.seed = 11;
  const SampledToken expected = plain.sample_one(row);
  CHECK(out[1].token_id == expected.token_id);
  REQUIRE(out[1].logprobs.top.size() == expected.logprobs.top.size());
  for (size_t k = 0; k < expected.logprobs.top.size(); ++k)
    CHECK(out[1].logprobs.top[k] == expected.logprobs.top[k]);

  // The history kept both rows' ids; truncate_history drops the second.
  sampler.truncate_history(7, 0, 2);
  CHECK_THROWS_WITH(sampler.truncate_history(7, 0, 3), Catch::Contains("truncate_history to 3"));
  sampler.sample(one, std::vector<DeviceSampler::Row>{{7, 0, 2, -1}}, out);  // accepted: its count matches
}

TEST_CASE("a request's num_speculative_tokens caps its drafts, 0 turning them off; out of range is refused",
          "[speculation][scheduler]") {
  SamplingParams bad;
  bad.num_speculative_tokens = 65;
  CHECK_THROWS_WITH(validate_sampling_params(bad), Catch::Contains("'num_speculative_tokens' must be in [-1, 64]"));
  bad.num_speculative_tokens = -2;
  CHECK_THROWS_WITH(validate_sampling_params(bad), Catch::Contains("num_speculative_tokens"));

  NgramScheduler harness("kv.vm");
  Scheduler& sched = harness.sched;
  // Three requests with the same repeating prompt: the engine's 3 drafts,
  // a cap of 1, and none.
  for (const int32_t cap : {-1, 1, 0}) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 10;
    sp.num_speculative_tokens = cap;
    sched.add_request("cap" + std::to_string(cap), {1, 2, 3, 1, 2}, sp);
  }
  StepPlan prefill = sched.schedule();
  REQUIRE(prefill.seqs.size() == 3);
  sched.update_from_output(prefill, {3, 3, 3});
  StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == 3);
  std::map<std::string, int32_t> drafts;
  for (const ScheduledSeq& s : step.seqs) drafts[sched.sequence(s.seq_id)->request_id] = s.num_draft_tokens;
  CHECK(drafts["cap-1"] == 3);
  CHECK(drafts["cap1"] == 1);
  CHECK(drafts["cap0"] == 0);
}

TEST_CASE("requests that turn drafts off (num_speculative_tokens 0) let the next step be planned ahead",
          "[speculation][scheduler]") {
  // Planning ahead (scheduler.overlap) cannot draft, so a step holding a
  // decode that may speculate is not followed by a plan made ahead; one
  // whose requests all turned speculation off is.
  for (const int32_t cap : {-1, 0}) {
    INFO("num_speculative_tokens " << cap);
    NgramScheduler harness("kv.paged");
    Scheduler& sched = harness.sched;
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 10;
    sp.num_speculative_tokens = cap;
    sched.add_request("a", {1, 2, 3, 1, 2}, sp);
    sched.add_request("b", {4, 5, 6, 4, 5}, sp);
    StepPlan prefill = sched.schedule();
    REQUIRE(prefill.seqs.size() == 2);
    sched.update_from_output(prefill, {3, 6});
    StepPlan decode = sched.schedule();
    REQUIRE(decode.seqs.size() == 2);
    const StepPlan ahead = sched.schedule_ahead(decode);
    if (cap == 0) {
      for (const ScheduledSeq& s : decode.seqs) CHECK(s.num_draft_tokens == 0);
      CHECK(ahead.seqs.size() == 2);
    } else {
      CHECK(ahead.empty());
    }
  }
}
