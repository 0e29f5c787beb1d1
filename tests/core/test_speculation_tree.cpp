// Token trees without a model: prompt lookup's multi-candidate trees
// against hand-built ones, the path rule, a tree step's rows and its update
// (KV moves and rollback), and whole runs under every allocator against the
// fake model's reference, which reads each row's context through the tree.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"
#include "core/sampler.hpp"
#include "core/speculation.hpp"
#include "scheduler_fakes.hpp"

using namespace llmk;
using namespace llmk::sched_test;

namespace {

SpeculativeSection ngram_tree(uint32_t k, uint32_t width, uint32_t nodes = 0) {
  SpeculativeSection s;
  s.method = "ngram";
  s.num_tokens = k;
  s.prompt_lookup_min = 1;
  s.prompt_lookup_max = 3;
  s.tree_width = width;
  s.tree_nodes = nodes;
  return s;
}

// Next token from the last two, over five ids (test_speculation.cpp's).
int32_t bigram_next(const std::vector<int32_t>& context, int32_t sample_index) {
  const size_t n = context.size();
  const uint64_t a = static_cast<uint32_t>(context[n - 1]), b = n > 1 ? static_cast<uint32_t>(context[n - 2]) : 7u;
  const uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ static_cast<uint64_t>(sample_index);
  return 10 + static_cast<int32_t>((h >> 29) % 5);
}

std::vector<int32_t> bigram_reference(std::vector<int32_t> context, const SamplingParams& sp, int32_t index) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < sp.max_tokens) {
    const int32_t t = bigram_next(context, index);
    context.push_back(t);
    out.push_back(t);
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), t) != sp.stop_token_ids.end()) break;
  }
  return out;
}

}  // namespace

TEST_CASE("prompt lookup as a tree merges the continuations of the latest occurrences by common prefix",
          "[speculation][tree]") {
  // Suffix [1 2] occurs at 0 (then 3 4 5), at 5 (then 3 6 7) and at 10
  // (then 8 9 2).
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2, 8, 9, 2, 1, 2};
  const NgramProposer wide(1, 2, 3);
  DraftTree tree;
  wide.propose_tree(tokens, 3, 16, tree);
  // Latest first: 8 9 2, then 3 6 7, then 3 4 5 (sharing 3).
  CHECK(tree.tokens == std::vector<int32_t>{8, 9, 2, 3, 6, 7, 4, 5});
  CHECK(tree.parents == std::vector<int32_t>{-1, 0, 1, -1, 3, 4, 3, 6});
  std::vector<int32_t> depths;
  tree.depths(depths);
  CHECK(depths == std::vector<int32_t>{1, 2, 3, 1, 2, 3, 2, 3});
  // A node budget cuts the last continuation short; the first stays whole.
  wide.propose_tree(tokens, 3, 7, tree);
  CHECK(tree.tokens == std::vector<int32_t>{8, 9, 2, 3, 6, 7, 4});
  // Width 2 stops after two continuations; a shorter suffix fills in when
  // the longest has too few occurrences.
  NgramProposer(1, 2, 2).propose_tree(tokens, 2, 16, tree);
  CHECK(tree.tokens == std::vector<int32_t>{8, 9, 3, 6});
  NgramProposer(1, 3, 2).propose_tree(std::vector<int32_t>{1, 2, 3, 9, 2, 3, 4, 1, 2, 3}, 2, 16, tree);
  CHECK(tree.tokens == std::vector<int32_t>{9, 2, 4, 1});  // [1 2 3] once (then 9 2), [2 3] at 4 (then 4 1)
  CHECK(tree.parents == std::vector<int32_t>{-1, 0, -1, 2});
  // Width 1 is prompt lookup's chain.
  std::vector<int32_t> chain;
  NgramProposer(1, 2).propose(tokens, 3, chain);
  std::vector<DraftTree> out;
  NgramProposer(1, 2, 1).propose_trees(std::vector<DraftRequest>{DraftRequest{1, tokens, 3, 100, 16}}, out);
  CHECK(out.at(0).tokens == chain);
  CHECK(out.at(0).is_chain());
}

TEST_CASE("a tree's path follows the child holding each row's choice, and stops where none does",
          "[speculation][tree]") {
  DraftTree tree;
  tree.tokens = {5, 6, 7, 8, 9};
  tree.parents = {-1, -1, 1, 1, 3};
  // Rows: the newest token's, then nodes 0..4.
  CHECK(accepted_path(tree, std::vector<int32_t>{6, 0, 8, 0, 9, 4}) == std::vector<int32_t>{1, 3, 4});
  CHECK(accepted_path(tree, std::vector<int32_t>{6, 0, 7, 1, 2, 3}) == std::vector<int32_t>{1, 2});
  CHECK(accepted_path(tree, std::vector<int32_t>{5, 6, 7, 8, 9, 1}) == std::vector<int32_t>{0});
  CHECK(accepted_path(tree, std::vector<int32_t>{4, 5, 6, 7, 8, 9}).empty());
}

TEST_CASE("a tree step places nodes by depth, masks them by parent, and its update moves the path's KV",
          "[speculation][tree][scheduler]") {
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), 512, 8, 128, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerOptions options;
  options.speculative = ngram_tree(3, 2);
  options.token_trees = true;
  Scheduler sched(scheduler_section(4, 64), SchedulerLimits{128, {}, 0}, kv, options);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 20;
  sched.add_request("r", {1, 2, 3, 4, 1, 2, 5, 6, 1}, sp);
  StepPlan prefill = sched.schedule();
  sched.update_from_output(prefill, {2});  // ... 1 2: [1 2] at 4 (then 5 6 1) and at 0 (then 3 4 1)

  StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == 1);
  CHECK(step.seqs[0].num_draft_tokens == 6);
  CHECK(step.seqs[0].draft_parents == std::vector<int32_t>{-1, 0, 1, -1, 3, 4});
  CHECK(step.batch.token_ids == std::vector<int32_t>{2, 5, 6, 1, 3, 4, 1});
  CHECK(step.batch.positions == std::vector<int32_t>{9, 10, 11, 12, 10, 11, 12});
  CHECK(step.batch.tree_parents == std::vector<int32_t>{-1, 0, 1, 2, 0, 4, 5});
  CHECK(step.batch.context_lens == std::vector<int32_t>{16});
  REQUIRE(step.logits.size() == 7);
  const std::vector<int32_t> generated{1, 2, 3, 4, 2, 3, 4}, parents{-1, 0, 1, 2, 0, 4, 5};
  for (size_t i = 0; i < 7; ++i) {
    INFO("row " << i);
    CHECK(step.logits[i].num_generated == generated[i]);
    CHECK(step.logits[i].tree_parent == parents[i]);
    CHECK(step.logits[i].draft_token == -1);
  }
  std::vector<int32_t> table;
  kv.block_table(1, table);
  auto slot = [&](int32_t p) { return table.at(size_t(p / 8)) + p % 8; };

  // The model takes the second branch: 3, then 4, then 9 where 1 was drafted.
  const auto events = sched.update_from_output(step, {3, 0, 0, 0, 4, 9, 0});
  REQUIRE(events.size() == 3);
  CHECK(events[0].token_id == 3);
  CHECK(events[0].logits_row == 0);
  CHECK(events[1].token_id == 4);
  CHECK(events[1].logits_row == 4);
  CHECK(events[2].token_id == 9);
  CHECK(events[2].logits_row == 5);
  const Sequence* seq = sched.sample("r", 0);
  REQUIRE(seq != nullptr);
  CHECK(seq->num_computed_tokens == 12);  // ... 2 3 4 cached, 9 to feed
  CHECK(kv.usage().used_slots == 12);
  CHECK(sched.stats().num_spec_accepted_tokens == 2);
  // The next plan first moves nodes 3 and 4 (cache positions 13, 14) to 10, 11.
  StepPlan next = sched.schedule();
  REQUIRE(next.batch.kv_copies.size() == 2);
  CHECK(next.batch.kv_copies[0].src_slot == slot(13));
  CHECK(next.batch.kv_copies[0].dst_slot == slot(10));
  CHECK(next.batch.kv_copies[1].src_slot == slot(14));
  CHECK(next.batch.kv_copies[1].dst_slot == slot(11));
  CHECK(next.batch.positions.front() == 12);
}

TEST_CASE("with token trees, every allocator gives the reference tokens under preemption and chunked prefill",
          "[speculation][tree][scheduler][plugins]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  const std::string mode = GENERATE(as<std::string>{}, "recompute", "offload");
  INFO(plugin << ", preemption " << mode);
  const uint32_t max_seq_len = 96, num_slots = 4 * max_seq_len;
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, 8, max_seq_len, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  FakeModel model(num_slots);
  model.next_token = bigram_next;
  SchedulerOptions options{[] { return TimePoint{}; }, &model};
  options.speculative = ngram_tree(4, 3, 10);
  options.token_trees = true;
  Scheduler sched(scheduler_section(12, 40, "continuous", mode), SchedulerLimits{int32_t(max_seq_len), {}, 0}, kv,
                  options);
  std::mt19937 rng(7);
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
    j.sp.max_tokens = std::min<int32_t>(gen(rng), int32_t(max_seq_len) - int32_t(j.prompt.size()));
    j.sp.temperature = pick(rng) < 2 ? 0.7f : 0.0f;       // the fake model's ids ignore it
    if (pick(rng) == 0) j.sp.repetition_penalty = 1.2f;  // penalties: chains
    if (pick(rng) == 0) j.sp.stop_token_ids = {12};
    jobs.push_back(std::move(j));
  }
  std::map<std::string, std::vector<int32_t>> tokens;
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
      if (e.token_id) tokens[e.request_id].push_back(*e.token_id);
      CHECK(e.error == "");
      if (e.request_done) done[e.request_id] += 1;
    }
  }
  for (const Job& j : jobs) {
    INFO("request " << j.id);
    CHECK(done[j.id] == 1);
    CHECK(tokens[j.id] == bigram_reference(j.prompt, j.sp, 0));
  }
  const SchedulerStats s = sched.stats();
  CHECK(s.num_spec_accepted_tokens > 0);
  CHECK(s.num_spec_accepted_tokens < s.num_spec_draft_tokens);
  CHECK(s.kv.num_seqs == 0);
  CHECK(s.kv.used_slots == 0);
}

namespace {

// softmax(logits / temperature) kept to the shortest best-first run whose
// mass reaches top_p, renormalised, in double (core/sampler.hpp's order).
std::vector<double> top_p_distribution(const std::vector<float>& logits, double temperature, double top_p) {
  std::vector<double> w(logits.size());
  const double m = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (size_t i = 0; i < w.size(); ++i) total += (w[i] = std::exp((logits[i] - m) / temperature));
  std::vector<size_t> order(w.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w[a] > w[b]; });
  std::vector<double> p(w.size(), 0.0);
  double kept = 0, cumulative = 0;
  for (size_t i : order) {
    p[i] = w[i];
    kept += w[i];
    cumulative += w[i] / total;
    if (cumulative >= top_p) break;
  }
  for (double& v : p) v /= kept;
  return p;
}

}  // namespace

TEST_CASE("sampled token trees emit the target's distribution: 10^5 two-token draws pass chi-square at p > 0.001",
          "[speculation][tree][sampler]") {
  // One step of a tree: the newest token's row, and children c1 and c2 of
  // it, each with c1's own children. Every row draws from its own logits
  // with the sample's seed at the counter of its depth; the path follows the
  // draws. Emitted (x1, x2) must be distributed as p0(x1) p_x1(x2) for x1 a
  // child, and x1 alone as p0(x1) otherwise.
  const int32_t vocab = 7;
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 0.8f);
  auto random_logits = [&] {
    std::vector<float> v(vocab);
    for (float& x : v) x = logit(rng);
    return v;
  };
  const std::vector<float> root = random_logits(), after_c1 = random_logits(), after_c2 = random_logits();
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  const std::vector<double> p0 = top_p_distribution(root, 0.9, 0.95);
  const std::vector<double> p1 = top_p_distribution(after_c1, 0.9, 0.95), p2 = top_p_distribution(after_c2, 0.9, 0.95);
  std::vector<int32_t> by_prob(vocab);
  for (int32_t i = 0; i < vocab; ++i) by_prob[size_t(i)] = i;
  std::sort(by_prob.begin(), by_prob.end(), [&](int32_t a, int32_t b) { return p0[size_t(a)] > p0[size_t(b)]; });
  const int32_t c1 = by_prob[0], c2 = by_prob[2];  // the likeliest and a less likely candidate
  DraftTree tree;
  tree.tokens = {c1, c2, by_prob[1], by_prob[3]};
  tree.parents = {-1, -1, 0, 0};  // grandchildren under c1: their rows' draws are not emitted here
  // Categories: (x1, x2) for x1 in {c1, c2}; x1 alone otherwise.
  std::vector<double> expected;
  std::map<std::pair<int32_t, int32_t>, size_t> category;
  for (int32_t a = 0; a < vocab; ++a) {
    if (a == c1 || a == c2) {
      for (int32_t b = 0; b < vocab; ++b) {
        category[{a, b}] = expected.size();
        expected.push_back(p0[size_t(a)] * (a == c1 ? p1 : p2)[size_t(b)]);
      }
    } else {
      category[{a, -1}] = expected.size();
      expected.push_back(p0[size_t(a)]);
    }
  }
  Sampler sampler(vocab, 1);
  const std::vector<int32_t> history{3, 4};
  const int64_t draws = 100000;
  std::vector<int64_t> counts(expected.size(), 0);
  for (int64_t d = 0; d < draws; ++d) {
    const uint64_t seed = uint64_t(d) * 104729u + 7;
    auto draw = [&](const std::vector<float>& logits, std::vector<int32_t> generated) {
      SamplerRow row;
      row.logits = logits.data();
      row.params = &p;
      row.generated_ids = generated;
      row.seed = seed;
      return sampler.sample_one(row).token_id;
    };
    std::vector<int32_t> choices{draw(root, history)};
    for (int32_t j = 0; j < tree.size(); ++j) {
      std::vector<int32_t> generated = history;
      for (int32_t x = j; x >= 0; x = tree.parents[size_t(x)]) generated.insert(generated.begin() + 2, tree.tokens[size_t(x)]);
      const std::vector<float>& logits = j == 0 ? after_c1 : j == 1 ? after_c2 : root;
      choices.push_back(draw(logits, generated));
    }
    const std::vector<int32_t> path = accepted_path(tree, choices);
    const int32_t x1 = choices[0];
    const int32_t x2 = path.empty() ? -1 : choices[size_t(1 + path[0])];
    REQUIRE(category.count({x1, x2}) == 1);
    ++counts[category[{x1, x2}]];
  }
  double stat = 0, small_e = 0, small_o = 0;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * double(draws);
    if (e < 5) {
      small_e += e;
      small_o += double(counts[i]);
      continue;
    }
    stat += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++df;
  }
  if (small_e >= 5) {
    stat += (small_o - small_e) * (small_o - small_e) / small_e;
    ++df;
  }
  REQUIRE(df >= 5);
  const double a = 2.0 / (9.0 * df), critical = df * std::pow(1 - a + 3.090232306 * std::sqrt(a), 3);  // 0.999
  INFO("chi-square " << stat << " with " << df << " degrees of freedom, critical " << critical);
  CHECK(stat < critical);
}

TEST_CASE("token tree settings are validated once, naming the keys", "[speculation][tree][config]") {
  auto refused = [](const std::vector<std::string>& overrides) {
    try {
      load_config({}, overrides);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused({"speculative.method=ngram", "speculative.tree_width=4", "speculative.tree_nodes=12"}) == "accepted");
  CHECK(refused({"speculative.method=ngram", "speculative.tree_width=4"}) == "accepted");
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.tree_width=0"}),
             Catch::Contains("speculative.tree_width") && Catch::Contains("out of range"));
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.tree_width=17"}), Catch::Contains("speculative.tree_width"));
  CHECK_THAT(refused({"speculative.method=none", "speculative.tree_width=2"}),
             Catch::Contains("speculative.tree_width") && Catch::Contains("ngram"));
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.num_tokens=6", "speculative.tree_nodes=5"}),
             Catch::Contains("speculative.tree_nodes") && Catch::Contains("num_tokens (6)"));
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.tree_nodes=65"}), Catch::Contains("speculative.tree_nodes"));
  const EngineConfig defaults = load_config({}, {});
  CHECK(defaults.speculative.tree_width == 1);
  CHECK(defaults.speculative.tree_nodes == 0);
}

TEST_CASE("without an attention plugin that reads trees, a tree_width above 1 verifies chains",
          "[speculation][tree][scheduler]") {
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), 512, 8, 128, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerOptions options;
  options.speculative = ngram_tree(3, 2);
  options.token_trees = false;
  Scheduler sched(scheduler_section(4, 64), SchedulerLimits{128, {}, 0}, kv, options);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 20;
  sched.add_request("r", {1, 2, 3, 4, 1, 2, 5, 6, 1}, sp);
  StepPlan prefill = sched.schedule();
  sched.update_from_output(prefill, {2});
  const StepPlan step = sched.schedule();
  REQUIRE(step.seqs.size() == 1);
  CHECK(step.seqs[0].draft_parents.empty());
  CHECK(step.batch.tree_parents.empty());
  CHECK(step.batch.token_ids == std::vector<int32_t>{2, 5, 6, 1});  // the latest occurrence's chain
}
