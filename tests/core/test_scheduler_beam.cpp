// Beam search in the scheduler (core/scheduler_beam.cpp) on the real
// stories260K forward, against tests/beam_reference.py's float64 NumPy beam
// search: the same hypotheses (tokens, finish reasons) and scores, for
// widths 1, 2 and 4, length penalties and the three early_stopping rules,
// through kv.paged, kv.contiguous and kv.vm, each search alone and all of
// them beside other requests in one continuous batch, and under a cache so
// small that searches restart. Then the K/V a width-4 search holds on
// kv.paged: the blocks its beams share by copy-on-write, counted from their
// tokens, not width times the prompt. And the parameters and engines it
// refuses, by name.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "core/checkpoint.hpp"
#include "core/generate.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"
#include "sample_plan.hpp"
#include "scheduler_fakes.hpp"
#include "support/command.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using nlohmann::json;

namespace {

// llmk's float32 forward against float64: a search's cumulative
// log-probability may differ by this much, and every decision the reference
// made must have a margin several times larger (its cases are chosen so).
constexpr double kLogprobTolerance = 5e-5;
constexpr double kMinMargin = 1e-3;

const json& reference() {
  static const json ref = [] {
    const test::CommandResult r = test::run_command(test::venv_python() + " " LLMK_SOURCE_DIR
                                                    "/tests/beam_reference.py " LLMK_SHARED_DIR "/models/stories260K");
    INFO(r.out);
    REQUIRE(r.status == 0);
    return json::parse(r.out);
  }();
  return ref;
}

SamplingParams beam_params(const json& c) {
  SamplingParams p;
  p.beam_width = c["width"];
  p.n = c["n"];
  p.max_tokens = c["max_tokens"];
  p.length_penalty = c["length_penalty"];
  p.temperature = 0;
  p.stop_token_ids = c["stop_token_ids"].get<std::vector<int32_t>>();
  const json& e = c["early_stopping"];
  p.early_stopping = e.is_string() ? EarlyStopping::never : e.get<bool>() ? EarlyStopping::immediate
                                                                          : EarlyStopping::heuristic;
  return p;
}

struct Rig {
  std::shared_ptr<const Checkpoint> ckpt = load_checkpoint(std::string(LLMK_SHARED_DIR) + "/models/stories260K");
  PluginRegistry plugins;
  EngineConfig cfg;
  ModelRuntime rt;
  std::unique_ptr<Model> model;
  Rig(uint32_t capacity, uint32_t block_size) {
    cfg.executor.num_threads = 1;
    cfg.kv_cache.capacity_tokens = capacity;
    cfg.kv_cache.block_size = block_size;
    cfg.kv_cache.max_seq_len = 64;
    cfg.kv_cache.dtype = DType::f32;  // float32 throughout: the reference's noise bound
    rt = resolve_runtime(cfg, *ckpt);
    model = std::make_unique<Model>(ckpt, plugins, cfg, rt);
  }
  int32_t vocab() const { return model->config().vocab_size; }
  KvAllocatorImpl allocator(const std::string& name, uint32_t block_size) {
    const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, block_size, rt.max_seq_len, 0,
                                      "{}", nullptr, nullptr};
    return KvAllocatorImpl(plugins.load(name, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  }
};

struct Output {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::none;
  std::optional<BeamScore> beam;
  std::string error;
};

// Runs the scheduler to the end; `after_schedule` sees every plan.
std::map<std::pair<std::string, int32_t>, Output> run(
    Scheduler& sched, Rig& rig, const std::function<void(const StepPlan&)>& after_schedule = {}) {
  Sampler sampler(rig.vocab(), 1);
  std::map<std::pair<std::string, int32_t>, Output> got;
  std::vector<float> logits;
  auto take = [&got](const TokenEvent& e) {
    Output& o = got[{e.request_id, e.index}];
    if (e.token_id) o.tokens.push_back(*e.token_id);
    if (e.finished) {
      o.reason = e.finish_reason;
      o.beam = e.beam;
      o.error = e.error;
    }
  };
  for (int step = 0; sched.has_work(); ++step) {
    REQUIRE(step < 5000);
    StepPlan plan = sched.schedule();
    for (const TokenEvent& e : plan.events) take(e);
    if (plan.empty()) continue;
    if (after_schedule) after_schedule(plan);
    logits.resize(size_t(plan.batch.num_logits()) * size_t(rig.vocab()));
    rig.model->forward(plan.batch, logits.data());
    const std::vector<SampledToken> rows = test::sample_rows(sched, sampler, plan, logits, rig.vocab());
    std::vector<int32_t> ids;
    for (const SampledToken& r : rows) ids.push_back(r.token_id);
    for (const TokenEvent& e : sched.update_from_output(plan, ids, &rows)) take(e);
  }
  return got;
}

void check_case(const json& c, const std::map<std::pair<std::string, int32_t>, Output>& got, const std::string& id) {
  INFO("case " << c["name"].get<std::string>());
  REQUIRE(c["margin"].get<double>() >= kMinMargin);  // the case's decisions are far from float32 noise
  for (size_t k = 0; k < c["outputs"].size(); ++k) {
    INFO("hypothesis " << k);
    const json& want = c["outputs"][k];
    const auto it = got.find({id, int32_t(k)});
    REQUIRE(it != got.end());
    const Output& o = it->second;
    CHECK(o.error == "");
    CHECK(o.tokens == want["tokens"].get<std::vector<int32_t>>());
    CHECK(to_string(o.reason) == want["reason"].get<std::string>());
    REQUIRE(o.beam.has_value());
    CHECK(std::fabs(o.beam->cumulative_logprob - want["cumulative_logprob"].get<double>()) < kLogprobTolerance);
    CHECK(std::fabs(o.beam->score - want["score"].get<double>()) < kLogprobTolerance);
  }
  CHECK_FALSE(got.count({id, int32_t(c["outputs"].size())}));
  if (c["width"] == 1) CHECK(got.at({id, 0}).tokens == c["greedy"].get<std::vector<int32_t>>());
}

SchedulerSection section(uint32_t max_num_seqs, uint32_t max_batched) {
  SchedulerSection s;
  s.max_num_seqs = max_num_seqs;
  s.max_num_batched_tokens = max_batched;
  return s;
}

}  // namespace

TEST_CASE("beam search gives the float64 reference's hypotheses and scores on every allocator",
          "[scheduler][beam]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with numpy (scripts/setup.sh makes it)");
  const std::string allocator = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  const bool together = GENERATE(false, true);
  INFO(allocator << (together ? ", every search and three other requests in one batch" : ", each search alone"));
  const json& ref = reference();
  Rig rig(64 * 48, 16);
  KvAllocatorImpl kv = rig.allocator(allocator, 16);
  const SchedulerLimits limits{int32_t(rig.rt.max_seq_len), {2}, rig.vocab()};

  // Other requests: greedy, sampled with n = 2, greedy; their tokens must
  // be generate()'s (references first: generate() uses the cache from slot 0).
  std::vector<std::pair<std::string, SamplingParams>> others;
  std::vector<std::vector<int32_t>> other_prompts = {{1, 291, 262, 379, 286}, {1, 274, 287, 381}, {1, 301, 425}};
  for (int i = 0; i < 3; ++i) {
    SamplingParams p;
    p.temperature = i == 1 ? 0.8f : 0.0f;
    p.n = i == 1 ? 2 : 1;
    p.seed = 7 + i;
    p.max_tokens = 20 + 5 * i;
    p.ignore_eos = true;
    others.push_back({"other" + std::to_string(i), p});
  }
  std::vector<std::vector<int32_t>> other_expected;
  for (size_t i = 0; i < others.size(); ++i) {
    SamplingParams one = others[i].second;
    one.n = 1;
    other_expected.push_back(generate(*rig.model, other_prompts[i], one, {}, [](int32_t) { return true; }).token_ids);
  }

  if (together) {
    Scheduler sched(section(64, 256), limits, kv);
    for (size_t i = 0; i < others.size(); ++i) sched.add_request(others[i].first, other_prompts[i], others[i].second);
    for (const json& c : ref["cases"])
      sched.add_request(c["name"], c["prompt"].get<std::vector<int32_t>>(), beam_params(c));
    const auto got = run(sched, rig);
    for (const json& c : ref["cases"]) check_case(c, got, c["name"]);
    for (size_t i = 0; i < others.size(); ++i) {
      INFO(others[i].first);
      CHECK(got.at({others[i].first, 0}).tokens == other_expected[i]);
      CHECK(got.at({others[i].first, int32_t(others[i].second.n - 1)}).tokens.size() ==
            size_t(others[i].second.max_tokens));
    }
    CHECK(sched.stats().kv.num_seqs == 0);
  } else {
    for (const json& c : ref["cases"]) {
      Scheduler sched(section(64, 256), limits, kv);
      sched.add_request(c["name"], c["prompt"].get<std::vector<int32_t>>(), beam_params(c));
      check_case(c, run(sched, rig), c["name"]);
      CHECK(sched.stats().kv.num_seqs == 0);
    }
  }
}

TEST_CASE("beam searches that do not all fit restart whole and still give the reference", "[scheduler][beam]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with numpy (scripts/setup.sh makes it)");
  const json& ref = reference();
  Rig rig(160, 8);  // 20 blocks of 8: two width-4 searches of ~30 tokens cannot both hold their beams
  KvAllocatorImpl kv = rig.allocator("kv.paged", 8);
  Scheduler sched(section(16, 64), SchedulerLimits{int32_t(rig.rt.max_seq_len), {2}, rig.vocab()}, kv);
  std::vector<const json*> cases;
  for (const json& c : ref["cases"])
    if (c["width"] == 4) cases.push_back(&c);
  REQUIRE(cases.size() >= 2);
  for (const json* c : cases) sched.add_request((*c)["name"], (*c)["prompt"].get<std::vector<int32_t>>(), beam_params(*c));
  const auto got = run(sched, rig);
  for (const json* c : cases) check_case(*c, got, (*c)["name"]);
  CHECK(sched.stats().num_preemptions > 0);
  CHECK(sched.stats().kv.num_seqs == 0);
}

TEST_CASE("a width-4 beam search on kv.paged holds the blocks its beams share once", "[scheduler][beam][kv]") {
  const uint32_t block = 8;
  Rig rig(4096, block);
  KvAllocatorImpl kv = rig.allocator("kv.paged", block);
  Scheduler sched(section(16, 64), SchedulerLimits{int32_t(rig.rt.max_seq_len), {2}, rig.vocab()}, kv);
  SamplingParams p;
  p.beam_width = 4;
  p.n = 4;
  p.temperature = 0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 301, 425, 411, 336, 432, 313, 457, 303, 359, 337, 267, 414, 450, 436};
  sched.add_request("b", prompt, p);
  size_t num_checked = 0, most_copied = 0, most_shared = 0;
  run(sched, rig, [&](const StepPlan& plan) {
    // After planning, every beam's K/V reaches its newest token. A block
    // is one allocator block for every beam whose tokens agree up to its
    // end (they were one sequence when it filled); a partial last block is
    // the beam's own. Copying each beam's K/V would take a block per beam.
    std::set<std::vector<int32_t>> distinct;  // a block: its last position's token prefix
    size_t copied = 0;
    for (const ScheduledSeq& s : plan.seqs) {
      const Sequence& seq = *sched.sequence(s.seq_id);
      const size_t length = size_t(seq.num_tokens());
      for (size_t end = block; end < length + block; end += block) {
        distinct.insert(std::vector<int32_t>(seq.tokens.begin(), seq.tokens.begin() + std::min(end, length)));
        copied += 1;
      }
    }
    const llmk_kv_usage u = kv.usage();
    INFO("step " << plan.step_id << ", " << plan.seqs.size() << " sequences");
    CHECK(u.reserved_slots == distinct.size() * block);
    if (plan.seqs.size() == 4) {
      ++num_checked;
      most_copied = std::max(most_copied, copied);
      most_shared = std::max(most_shared, copied - distinct.size());
    }
  });
  CHECK(num_checked >= 10);
  // The prompt's two blocks and the first tokens' are shared by all four.
  CHECK(most_shared >= 3 * (prompt.size() / block));
  CHECK(kv.usage().reserved_slots == 0);
  CHECK(kv.usage().num_cow_copies > 0);
}

TEST_CASE("beam search refuses what it cannot honour, naming the field", "[scheduler][beam]") {
  auto field_of = [](const SamplingParams& p) -> std::string {
    try {
      validate_sampling_params(p);
    } catch (const FieldError& e) {
      return e.field();
    }
    return "";
  };
  SamplingParams ok;
  ok.beam_width = 4;
  ok.n = 4;
  CHECK(field_of(ok) == "");  // temperature 1 (unset) reads the same raw log-probabilities
  ok.temperature = 0;
  CHECK(field_of(ok) == "");
  const std::vector<std::pair<std::string, std::function<void(SamplingParams&)>>> bad = {
      {"beam_width", [](SamplingParams& p) { p.beam_width = sampling_limits::max_beam_width + 1; }},
      {"n", [](SamplingParams& p) { p.n = 5; }},
      {"temperature", [](SamplingParams& p) { p.temperature = 0.7f; }},
      {"top_k", [](SamplingParams& p) { p.top_k = 5; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.9f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 0.1f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 1.2f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 0.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 0.5f; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 1; }},
      {"stop", [](SamplingParams& p) { p.stop = {"."}; }},
      {"num_speculative_tokens", [](SamplingParams& p) { p.num_speculative_tokens = 2; }},
      {"length_penalty", [](SamplingParams& p) { p.length_penalty = std::nanf(""); }},
  };
  for (const auto& [field, change] : bad) {
    INFO(field);
    SamplingParams p = ok;
    change(p);
    CHECK(field_of(p) == field);
  }

  // What the engine around the search cannot give: refused at admission, naming it.
  sched_test::FakePagedAllocator kv(64, 16);
  SchedulerSection s = section(4, 64);
  s.policy = "static";
  Scheduler static_sched(s, SchedulerLimits{256, {2}, 0}, kv);
  CHECK_THROWS_WITH(static_sched.add_request("a", {1, 2, 3}, ok), Catch::Contains("scheduler.policy continuous"));
  Scheduler small(section(2, 64), SchedulerLimits{256, {2}, 0}, kv);
  SamplingParams narrow = ok;
  narrow.n = 1;
  CHECK_THROWS_WITH(small.add_request("b", {1, 2, 3}, narrow), Catch::Contains("beam_width = 4"));
  CHECK_FALSE(small.has_work());
}
