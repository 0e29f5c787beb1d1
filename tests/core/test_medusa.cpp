// Medusa heads (core/medusa_heads.hpp, core/medusa_proposer.hpp) without a
// real model: the heads' forward against a float64 NumPy reference on
// random heads in Medusa's own file format (tests/support/medusa_heads.py),
// the file checks, the trees the proposer builds (the best-first tree
// against the whole product tree ranked by brute force; a fixed
// medusa_choices tree), and the scheduler handing the heads the hidden row
// of each sequence's newest verified position, after accepted and rejected
// drafts, under every allocator, checked against the fake model's contexts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/medusa_heads.hpp"
#include "core/medusa_proposer.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors_writer.hpp"
#include "scheduler_fakes.hpp"
#include "support/command.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::sched_test;
namespace fs = std::filesystem;

namespace {

std::string script() { return std::string(LLMK_SOURCE_DIR) + "/tests/support/medusa_heads.py"; }

// A tensor of `shape` filled with `value` as F32 bytes.
test::TensorSpec f32_tensor(const std::string& name, std::vector<int64_t> shape, float value = 0.01f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string bytes(static_cast<size_t>(n) * 4, '\0');
  for (int64_t i = 0; i < n; ++i) std::memcpy(bytes.data() + i * 4, &value, 4);
  return test::TensorSpec{name, "F32", std::move(shape), std::move(bytes)};
}

// Medusa's names for `heads` heads of `layers` blocks.
std::vector<test::TensorSpec> medusa_tensors(int heads, int layers, int64_t hidden, int64_t vocab) {
  std::vector<test::TensorSpec> t;
  for (int i = 0; i < heads; ++i) {
    for (int j = 0; j < layers; ++j) {
      t.push_back(f32_tensor(std::to_string(i) + "." + std::to_string(j) + ".linear.weight", {hidden, hidden}));
      t.push_back(f32_tensor(std::to_string(i) + "." + std::to_string(j) + ".linear.bias", {hidden}));
    }
    t.push_back(f32_tensor(std::to_string(i) + "." + std::to_string(layers) + ".weight", {vocab, hidden}));
  }
  return t;
}

std::string load_error(const fs::path& path, int32_t hidden, int32_t vocab) {
  try {
    MedusaHeads::load(path, hidden, vocab);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_config);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Medusa heads compute as a float64 NumPy forward of the same file", "[medusa]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv (scripts/setup.sh makes it): the NumPy reference is absent");
  const int heads = 3, hidden = 16, vocab = 40, rows = 5;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * hidden));
  for (float& v : x) v = normal(rng);
  nlohmann::json rows_json = nlohmann::json::array();
  for (int r = 0; r < rows; ++r)
    rows_json.push_back(std::vector<float>(x.begin() + r * hidden, x.begin() + (r + 1) * hidden));
  for (const char* dtype : {"f32", "f16", "bf16"})
    for (int layers : {0, 1, 2}) {
      INFO(dtype << ", " << layers << " blocks per head");
      test::TempDir dir;
      const fs::path in = dir.path() / "x.json";
      std::ofstream(in) << nlohmann::json{{"x", rows_json}}.dump();
      const test::CommandResult r = test::run_command(
          test::venv_python() + " " + script() + " random " + dir.path().string() + " " + std::to_string(heads) + " " +
          std::to_string(layers) + " " + std::to_string(hidden) + " " + std::to_string(vocab) + " 7 " + dtype + " < " +
          in.string());
      REQUIRE(r.status == 0);
      const auto expected = nlohmann::json::parse(r.out)["logits"];
      // The directory and the file itself load alike.
      const MedusaHeads m = MedusaHeads::load(dir.path(), hidden, vocab);
      const MedusaHeads by_file = MedusaHeads::load(dir.path() / "medusa_lm_head.safetensors", hidden, vocab);
      REQUIRE(m.num_heads() == heads);
      REQUIRE(m.num_layers() == layers);
      REQUIRE(by_file.num_layers() == layers);
      std::vector<float> logits(static_cast<size_t>(rows * vocab)), scratch;
      for (int h = 0; h < heads; ++h) {
        m.forward(h, x.data(), rows, logits.data(), scratch);
        double err = 0, norm = 0;
        for (int r2 = 0; r2 < rows; ++r2)
          for (int v = 0; v < vocab; ++v) {
            const double want = expected[h][r2][v].get<double>();
            err += std::pow(logits[static_cast<size_t>(r2 * vocab + v)] - want, 2);
            norm += want * want;
          }
        CHECK(std::sqrt(err / norm) < 1e-5);
        // One row alone gives that row's logits.
        std::vector<float> one(static_cast<size_t>(vocab));
        m.forward(h, x.data() + 2 * hidden, 1, one.data(), scratch);
        for (int v = 0; v < vocab; ++v) CHECK(one[static_cast<size_t>(v)] == Approx(logits[static_cast<size_t>(2 * vocab + v)]).margin(1e-5));
      }
    }
}

TEST_CASE("Medusa head files are refused by name: missing, of another shape, with unknown or missing tensors",
          "[medusa]") {
  test::TempDir dir;
  const fs::path file = dir.path() / "medusa_lm_head.safetensors";
  CHECK_THAT(load_error(dir.path() / "nowhere", 8, 20),
             Catch::Contains("speculative.medusa_heads") && Catch::Contains("does not exist"));
  CHECK_THAT(load_error(dir.path(), 8, 20), Catch::Contains("holds no medusa_lm_head.safetensors"));

  test::write_safetensors(file, medusa_tensors(2, 1, 8, 20));
  CHECK(MedusaHeads::load(dir.path(), 8, 20).num_heads() == 2);
  CHECK_THAT(load_error(file, 16, 20), Catch::Contains("'0.0.linear.weight' has shape [8, 8]") &&
                                           Catch::Contains("hidden_size 16"));
  CHECK_THAT(load_error(file, 8, 32), Catch::Contains("'0.1.weight' has shape [20, 8]") && Catch::Contains("vocab_size 32"));

  auto tensors = medusa_tensors(2, 1, 8, 20);
  tensors.push_back(f32_tensor("lm_head.weight", {20, 8}));
  test::write_safetensors(file, tensors);
  CHECK_THAT(load_error(file, 8, 20), Catch::Contains("tensor 'lm_head.weight' is not a Medusa head tensor"));

  tensors = medusa_tensors(2, 1, 8, 20);
  tensors.erase(std::find_if(tensors.begin(), tensors.end(), [](const auto& t) { return t.name == "1.0.linear.bias"; }));
  test::write_safetensors(file, tensors);
  CHECK_THAT(load_error(file, 8, 20), Catch::Contains("tensor '1.0.linear.bias' is missing"));

  tensors = medusa_tensors(2, 1, 8, 20);
  tensors.push_back(f32_tensor("0.5.linear.weight", {8, 8}));
  test::write_safetensors(file, tensors);
  CHECK_THAT(load_error(file, 8, 20), Catch::Contains("'0.5.linear.weight' is past the head's 1 layers"));

  test::write_safetensors(file, medusa_tensors(2, 1, 8, 20));
  std::ofstream(dir.path() / "config.json") << R"({"medusa_num_heads": 3, "medusa_num_layers": 1})";
  CHECK_THAT(load_error(dir.path(), 8, 20), Catch::Contains("medusa_num_heads 3") && Catch::Contains("holds 2 heads"));
  std::ofstream(dir.path() / "config.json") << R"({"medusa_num_heads": 2, "medusa_num_layers": 2})";
  CHECK_THAT(load_error(dir.path(), 8, 20), Catch::Contains("'0.2.weight' is missing (head 0 ends at layer 1)"));
}

namespace {

// Heads whose logits are known: head d puts logit values[d][v] on token v
// for any hidden state whose first element is 1 (blocks zero: identity).
std::shared_ptr<MedusaHeads> fixed_heads(const std::vector<std::vector<float>>& values, int32_t hidden) {
  const auto heads = static_cast<int32_t>(values.size());
  const auto vocab = static_cast<int32_t>(values[0].size());
  auto m = std::make_shared<MedusaHeads>(heads, 1, hidden, vocab);
  for (int32_t d = 0; d < heads; ++d)
    for (int32_t v = 0; v < vocab; ++v)
      m->out_weight(d)[static_cast<size_t>(v * hidden)] = values[static_cast<size_t>(d)][static_cast<size_t>(v)];
  return m;
}

std::vector<float> unit_hidden(int32_t hidden) {
  std::vector<float> x(static_cast<size_t>(hidden), 0.0f);
  x[0] = 1.0f;
  return x;
}

double log_softmax(const std::vector<float>& l, int32_t v) {
  double m = *std::max_element(l.begin(), l.end()), s = 0;
  for (float x : l) s += std::exp(x - m);
  return l[static_cast<size_t>(v)] - m - std::log(s);
}

// A tree as the set of its root-to-node token paths.
std::set<std::vector<int32_t>> paths_of(const DraftTree& t) {
  std::set<std::vector<int32_t>> out;
  for (int32_t j = 0; j < t.size(); ++j) {
    std::vector<int32_t> p;
    for (int32_t at = j; at >= 0; at = t.parents[static_cast<size_t>(at)]) p.insert(p.begin(), t.tokens[static_cast<size_t>(at)]);
    out.insert(p);
  }
  return out;
}

}  // namespace

TEST_CASE("the Medusa tree holds the likeliest nodes of the heads' top-k product tree, parents first", "[medusa]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  const int32_t vocab = 12, hidden = 4, k = 3;
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t depth = 1 + trial % 3;
    std::vector<std::vector<float>> values(3, std::vector<float>(static_cast<size_t>(vocab)));
    for (auto& head : values)
      for (float& v : head) v = normal(rng);
    auto heads = fixed_heads(values, hidden);
    MedusaProposer proposer(heads, k);
    const std::vector<int32_t> tokens{1, 5, 7};
    proposer.observe(9, 1, unit_hidden(hidden));  // position 1: drafts follow 3 tokens
    // Every node of the product tree, scored by brute force.
    std::vector<std::pair<double, std::vector<int32_t>>> all;
    std::vector<std::vector<int32_t>> top(3);
    for (int32_t d = 0; d < 3; ++d) {
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      for (int32_t v = 0; v < vocab; ++v) order[static_cast<size_t>(v)] = v;
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return values[size_t(d)][size_t(a)] > values[size_t(d)][size_t(b)]; });
      top[static_cast<size_t>(d)].assign(order.begin(), order.begin() + k);
    }
    std::function<void(std::vector<int32_t>, double)> grow = [&](std::vector<int32_t> path, double score) {
      if (!path.empty()) all.emplace_back(score, path);
      const auto d = static_cast<int32_t>(path.size());
      if (d == depth) return;
      for (int32_t t : top[static_cast<size_t>(d)]) {
        auto next = path;
        next.push_back(t);
        grow(next, score + log_softmax(values[static_cast<size_t>(d)], t));
      }
    };
    grow({}, 0.0);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int32_t nodes : {1, 2, 5, 9, 30}) {
      INFO("trial " << trial << ", depth " << depth << ", " << nodes << " nodes");
      DraftRequest r{9, tokens, depth, 100, nodes};
      std::vector<DraftTree> out;
      proposer.propose_trees({&r, 1}, out);
      REQUIRE(out.size() == 1);
      const DraftTree& t = out[0];
      const auto n = std::min<size_t>(static_cast<size_t>(nodes), all.size());
      REQUIRE(static_cast<size_t>(t.size()) == n);
      for (int32_t j = 0; j < t.size(); ++j) CHECK(t.parents[static_cast<size_t>(j)] < j);
      std::set<std::vector<int32_t>> want;
      for (size_t i = 0; i < n; ++i) want.insert(all[i].second);
      // Random scores tie with probability 0: the sets are equal.
      CHECK(paths_of(t) == want);
    }
    // A chain is each head's best; no hidden row for the sequence's length, no drafts.
    DraftRequest chain{9, tokens, depth, 100, 0};
    std::vector<std::vector<int32_t>> chains;
    proposer.propose({&chain, 1}, chains);
    REQUIRE(chains[0].size() == static_cast<size_t>(depth));
    for (int32_t d = 0; d < depth; ++d) CHECK(chains[0][static_cast<size_t>(d)] == top[static_cast<size_t>(d)][0]);
    const std::vector<int32_t> longer{1, 5, 7, 2};
    DraftRequest stale{9, longer, depth, 100, 5};
    std::vector<DraftTree> none;
    proposer.propose_trees({&stale, 1}, none);
    CHECK(none[0].empty());
    proposer.release(9);
    DraftRequest released{9, tokens, depth, 100, 5};
    proposer.propose_trees({&released, 1}, none);
    CHECK(none[0].empty());
  }
}

TEST_CASE("a medusa_choices tree is Medusa's paths sorted by depth, each node its head's ranked token", "[medusa]") {
  // Head 0 ranks tokens 3 > 1 > 0 > 2 ...; head 1 ranks 2 > 0 > 1 ...
  const std::vector<std::vector<float>> values{{2.0f, 3.0f, 0.5f, 4.0f, -1.0f}, {1.0f, 0.0f, 2.0f, -1.0f, -2.0f}};
  auto heads = fixed_heads(values, 4);
  const auto choices = parse_medusa_choices("[[1], [0, 0], [0], [0, 1], [2], [1, 0]]");
  MedusaProposer proposer(heads, 1, choices);
  CHECK(proposer.num_choices() == 6);
  const std::vector<int32_t> tokens{1, 2};
  proposer.observe(4, 0, unit_hidden(4));
  DraftRequest r{4, tokens, 2, 100, 6};
  std::vector<DraftTree> out;
  proposer.propose_trees({&r, 1}, out);
  // Sorted: [0] [1] [2] [0,0] [0,1] [1,0].
  CHECK(out[0].tokens == std::vector<int32_t>{3, 1, 0, 2, 0, 2});
  CHECK(out[0].parents == std::vector<int32_t>{-1, -1, -1, 0, 0, 1});
  r.max_nodes = 4;  // cut after the sort: still a tree
  proposer.propose_trees({&r, 1}, out);
  CHECK(out[0].tokens == std::vector<int32_t>{3, 1, 0, 2});
  r.max_tokens = 1;  // one head: depth-1 paths only
  r.max_nodes = 6;
  proposer.propose_trees({&r, 1}, out);
  CHECK(out[0].parents == std::vector<int32_t>{-1, -1, -1});

  auto refused = [](const std::string& text) {
    try {
      parse_medusa_choices(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused("[[0], [1, 0]]"), Catch::Contains("speculative.medusa_choices") && Catch::Contains("[1, 0]'s prefix"));
  CHECK_THAT(refused("[[0], [0]]"), Catch::Contains("listed twice"));
  CHECK_THAT(refused("[[0], [-1]]"), Catch::Contains("rank -1"));
  CHECK_THAT(refused("(0,)"), Catch::Contains("not a JSON list of paths"));
}

TEST_CASE("medusa settings are validated, naming the keys", "[medusa][config]") {
  auto error = [](const EngineConfig& c) {
    try {
      validate_speculative(c);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_config);
      return std::string(e.what());
    }
    return std::string();
  };
  EngineConfig c;
  c.speculative.method = "medusa";
  CHECK_THAT(error(c), Catch::StartsWith("speculative.medusa_heads: is empty"));
  c.speculative.medusa_heads = "/some/heads";
  CHECK(error(c).empty());
  c.speculative.medusa_top_k = 0;
  CHECK_THAT(error(c), Catch::StartsWith("speculative.medusa_top_k: 0 is out of range"));
  c.speculative.medusa_top_k = 4;
  c.speculative.medusa_choices = "[[1, 0]]";
  CHECK_THAT(error(c), Catch::StartsWith("speculative.medusa_choices:"));
  c.speculative.medusa_choices = "";
  c.executor.device = "cuda";
  CHECK_THAT(error(c), Catch::StartsWith("speculative.method: 'medusa'") && Catch::Contains("CPU executor") &&
                           Catch::Contains("executor.device is 'cuda'"));
  c.executor.device = "cpu";
  c.parallel.tensor = 2;
  CHECK_THAT(error(c), Catch::StartsWith("speculative.method: 'medusa'") && Catch::Contains("parallel.tensor 2"));
  c.parallel.tensor = 1;
  c.speculative.method = "ngram";
  CHECK_THAT(error(c), Catch::StartsWith("speculative.medusa_heads: is set but speculative.method is 'ngram'"));
}

namespace {

// The fake target of the flow test: tokens 10..14, the next one the last
// plus one (mod 5) except where the context's hash says plus three. Its
// "hidden state" after a context: the last token one-hot, the length, and
// the context's hash, so a row of any other context differs.
uint64_t context_hash(const std::vector<int32_t>& context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}

int32_t cycle_next(const std::vector<int32_t>& context, int32_t) {
  const int32_t step = (context_hash(context) >> 20) % 4 == 0 ? 3 : 1;
  return 10 + (context.back() - 10 + step) % 5;
}

constexpr int32_t kHidden = 8;

std::vector<float> fake_hidden(const std::vector<int32_t>& context) {
  std::vector<float> h(kHidden, 0.0f);
  h[static_cast<size_t>(context.back() - 10)] = 1.0f;
  h[5] = static_cast<float>(context.size()) / 100.0f;
  h[6] = static_cast<float>((context_hash(context) >> 11) % 1000) / 1000.0f;
  return h;
}

// Head d: after last token x, x + 2 + d first (no twist), then x + 4 + d (one).
std::shared_ptr<MedusaHeads> cycle_heads() {
  auto m = std::make_shared<MedusaHeads>(3, 1, kHidden, 32);
  for (int32_t d = 0; d < 3; ++d)
    for (int32_t x = 0; x < 5; ++x) {
      m->out_weight(d)[static_cast<size_t>((10 + (x + 2 + d) % 5) * kHidden + x)] = 5.0f;
      m->out_weight(d)[static_cast<size_t>((10 + (x + 4 + d) % 5) * kHidden + x)] = 3.0f;
    }
  return m;
}

}  // namespace

TEST_CASE("the scheduler hands Medusa heads the hidden row of each sequence's last accepted position, under every "
          "allocator, with trees and chains",
          "[medusa][scheduler][plugins]") {
  const std::string plugin = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous", "kv.vm");
  const bool trees = GENERATE(true, false);
  INFO(plugin << (trees ? ", trees" : ", chains"));
  const uint32_t max_seq_len = 96, num_slots = 3 * max_seq_len;
  PluginRegistry registry;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), num_slots, 8, max_seq_len, 1, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(registry.load(plugin, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  FakeModel model(num_slots);
  std::vector<std::vector<int32_t>> contexts;  // each logits row's, in row order
  model.next_token = [&](const std::vector<int32_t>& context, int32_t i) {
    contexts.push_back(context);
    return cycle_next(context, i);
  };
  auto medusa = std::make_shared<MedusaProposer>(cycle_heads(), 2);
  SchedulerOptions options{[] { return TimePoint{}; }, &model};
  options.speculative.method = "medusa";
  options.speculative.num_tokens = 3;
  options.speculative.tree_nodes = 6;
  options.proposer = medusa;
  options.token_trees = trees;
  Scheduler sched(scheduler_section(8, 40), SchedulerLimits{int32_t(max_seq_len), {}, 0}, kv, options);
  REQUIRE(sched.reads_hidden_rows());
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(10, 14), len(1, 30), gen(1, 50);
  std::map<std::string, std::vector<int32_t>> prompts, tokens;
  std::map<std::string, int32_t> wanted;
  for (int i = 0; i < 24; ++i) {
    const std::string id = "r" + std::to_string(i);
    for (int32_t k = len(rng); k > 0; --k) prompts[id].push_back(tok(rng));
    wanted[id] = std::min<int32_t>(gen(rng), int32_t(max_seq_len) - int32_t(prompts[id].size()));
  }
  int checked = 0;
  auto next_request = prompts.begin();
  for (int step = 0; next_request != prompts.end() || sched.has_work(); ++step) {
    REQUIRE(step < 5000);
    for (int k = 0; k < 2 && next_request != prompts.end(); ++k, ++next_request) {
      SamplingParams sp;
      sp.max_tokens = wanted[next_request->first];
      sched.add_request(next_request->first, next_request->second, sp);
    }
    StepPlan plan = sched.schedule();
    std::vector<TokenEvent> events = plan.events;
    if (!plan.empty()) {
      contexts.clear();
      const std::vector<int32_t> sampled = model.forward(plan);
      REQUIRE(contexts.size() == sampled.size());
      std::vector<float> hidden;
      for (const auto& c : contexts) {
        const auto row = fake_hidden(c);
        hidden.insert(hidden.end(), row.begin(), row.end());
      }
      const auto more = sched.update_from_output(plan, sampled, hidden);
      events.insert(events.end(), more.begin(), more.end());
      // Every sequence that sampled this step and lives on keeps the row of
      // the position before its newest token: its context is the tokens up
      // to that position.
      for (const ScheduledSeq& s : plan.seqs) {
        const Sequence* seq = sched.sequence(s.seq_id);
        if (seq == nullptr || s.num_logits_rows() == 0) continue;
        int32_t position = -1;
        const std::vector<float>* kept = medusa->hidden_of(s.seq_id, position);
        REQUIRE(kept != nullptr);
        REQUIRE(position == seq->num_tokens() - 2);
        CHECK(*kept == fake_hidden(std::vector<int32_t>(seq->tokens.begin(), seq->tokens.begin() + position + 1)));
        ++checked;
      }
    }
    for (const TokenEvent& e : events) {
      if (e.token_id) tokens[e.request_id].push_back(*e.token_id);
      CHECK(e.error == "");
    }
  }
  CHECK(checked > 100);
  for (const auto& [id, prompt] : prompts) {
    INFO("request " << id);
    std::vector<int32_t> context = prompt, expected;
    while (static_cast<int32_t>(expected.size()) < wanted[id]) expected.push_back(context.emplace_back(cycle_next(context, 0)));
    CHECK(tokens[id] == expected);
  }
  const SchedulerStats s = sched.stats();
  // Heads that know the rule: many drafts are accepted, not all (the twists:
  // a chain's first draft is right when neither of the next two tokens
  // twists, 9/16 of the time).
  CHECK(2 * s.num_spec_accepted_tokens > s.num_spec_drafts);
  if (trees) CHECK(s.num_spec_accepted_tokens > s.num_spec_drafts);
  CHECK(s.num_spec_accepted_tokens < s.num_spec_draft_tokens);
  CHECK(s.kv.used_slots == 0);
}
