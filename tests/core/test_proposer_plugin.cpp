// proposer.ngram, loaded as the engine loads it (make_proposer, through the
// C table of plugins/api/llmk_proposer.h), against prompt lookup's
// hand-computed drafts and trees, against an independent reference written
// here (every earlier occurrence listed, then merged through a map of
// edges), and against the in-process NgramProposer it replaced; and the
// configuration of speculative.proposer: its refusals name the key.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"
#include "core/plugin_proposer.hpp"
#include "core/speculation.hpp"

using namespace llmk;

namespace {

SpeculativeSection ngram(uint32_t min_n, uint32_t max_n, uint32_t width, uint32_t num_tokens = 8,
                         uint32_t tree_nodes = 0) {
  SpeculativeSection s;
  s.method = "ngram";
  s.num_tokens = num_tokens;
  s.prompt_lookup_min = min_n;
  s.prompt_lookup_max = max_n;
  s.tree_width = width;
  s.tree_nodes = tree_nodes;
  return s;
}

// Prompt lookup restated: every earlier occurrence of every suffix, longest
// suffix first and latest first; a chain is the first continuation, a tree
// the continuations merged by common prefix until `width` of them added a
// node or the tree holds max_nodes.
DraftTree reference(const std::vector<int32_t>& tokens, int32_t min_n, int32_t max_n, int32_t width, int32_t depth,
                    int32_t max_nodes) {
  const auto len = static_cast<int32_t>(tokens.size());
  std::vector<std::vector<int32_t>> continuations;
  for (int32_t n = std::min(max_n, len - 1); n >= min_n; --n)
    for (int32_t start = len - n - 1; start >= 0; --start)
      if (std::equal(tokens.end() - n, tokens.end(), tokens.begin() + start))
        continuations.emplace_back(tokens.begin() + start + n, tokens.begin() + std::min(len, start + n + depth));
  DraftTree tree;
  if (width == 1 || max_nodes == 0) {
    if (!continuations.empty()) tree = DraftTree::chain(continuations.front());
    return tree;
  }
  std::map<std::pair<int32_t, int32_t>, int32_t> child;  // (parent, token) -> node
  int32_t counted = 0;
  for (const auto& c : continuations) {
    if (counted == width || tree.size() == max_nodes) break;
    int32_t at = -1;
    bool added = false;
    for (const int32_t t : c) {
      if (const auto it = child.find({at, t}); it != child.end()) {
        at = it->second;
        continue;
      }
      if (tree.size() == max_nodes) break;
      tree.tokens.push_back(t);
      tree.parents.push_back(at);
      at = child[{at, t}] = tree.size() - 1;
      added = true;
    }
    counted += added ? 1 : 0;
  }
  return tree;
}

}  // namespace

TEST_CASE("proposer.ngram answers prompt lookup's hand-computed chains and trees", "[speculation][proposer]") {
  const std::vector<int32_t> t3{1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2, 8, 9, 2, 1, 2};
  struct Case {
    uint32_t min_n, max_n, width;
    std::vector<int32_t> tokens;
    int32_t depth, max_nodes;
    std::vector<int32_t> drafts, parents;
  };
  const Case cases[] = {
      // n = 4: [4 1 2 3] occurs nowhere earlier; n = 3: [1 2 3] at 0, followed by 4 1 2.
      {2, 4, 1, {1, 2, 3, 4, 1, 2, 3}, 3, 0, {4, 1, 2}, {-1, 0, 1}},
      {2, 4, 1, {1, 2, 3, 4, 1, 2, 3}, 1, 0, {4}, {-1}},
      // [5 6] at 0 and 3: the later (then 8 5) wins.
      {2, 2, 1, {5, 6, 7, 5, 6, 8, 5, 6}, 2, 0, {8, 5}, {-1, 0}},
      {1, 2, 1, {9, 9, 9}, 4, 0, {9}, {-1}},  // one token follows before the end
      {1, 2, 1, {4, 5, 6, 9, 5}, 2, 0, {6, 9}, {-1, 0}},
      {2, 2, 1, {4, 5, 6, 9, 5}, 2, 0, {}, {}},  // no 2-gram, and 1-grams are not looked for
      {1, 2, 1, {1, 2, 3, 4}, 3, 0, {}, {}},
      {1, 2, 1, {7}, 3, 0, {}, {}},
      // Trees: [1 2] at 10 (then 8 9 2), at 5 (then 3 6 7), at 0 (then 3 4 5, sharing 3).
      {1, 2, 3, t3, 3, 16, {8, 9, 2, 3, 6, 7, 4, 5}, {-1, 0, 1, -1, 3, 4, 3, 6}},
      {1, 2, 3, t3, 3, 7, {8, 9, 2, 3, 6, 7, 4}, {-1, 0, 1, -1, 3, 4, 3}},  // the budget cuts the last short
      {1, 2, 2, t3, 2, 16, {8, 9, 3, 6}, {-1, 0, -1, 2}},
      // [1 2 3] once (then 9 2); the shorter [2 3] at 4 (then 4 1) fills in.
      {1, 3, 2, {1, 2, 3, 9, 2, 3, 4, 1, 2, 3}, 2, 16, {9, 2, 4, 1}, {-1, 0, -1, 2}},
      // A tree request to a chain proposer (width 1) answers the chain.
      {1, 2, 1, t3, 3, 16, {8, 9, 2}, {-1, 0, 1}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.min_n, c.max_n, c.width, c.tokens, c.depth, c.max_nodes);
    const auto proposer = make_proposer(ngram(c.min_n, c.max_n, c.width, 8, 16));
    REQUIRE(proposer != nullptr);
    std::vector<DraftTree> out;
    proposer->propose_trees(std::vector<DraftRequest>{DraftRequest{1, c.tokens, c.depth, 100, c.max_nodes}}, out);
    CHECK(out.at(0).tokens == c.drafts);
    CHECK(out.at(0).parents == c.parents);
    CHECK(reference(c.tokens, static_cast<int32_t>(c.min_n), static_cast<int32_t>(c.max_n),
                    static_cast<int32_t>(c.width), c.depth, c.max_nodes)
              .tokens == c.drafts);
    if (c.max_nodes == 0) {
      std::vector<std::vector<int32_t>> chains;
      proposer->propose(std::vector<DraftRequest>{DraftRequest{1, c.tokens, c.depth, 100, 0}}, chains);
      CHECK(chains.at(0) == c.drafts);
    }
  }
}

TEST_CASE("proposer.ngram answers a batch as the independent reference and the in-process NgramProposer do",
          "[speculation][proposer]") {
  std::mt19937_64 rng(2024);
  const auto below = [&](int32_t n) { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n)); };
  struct Params {
    uint32_t min_n, max_n, width, num_tokens, tree_nodes;
  };
  const Params all[] = {{1, 1, 1, 4, 0},  {2, 4, 1, 8, 0},   {1, 3, 2, 4, 0},   {1, 3, 4, 4, 16},
                        {2, 3, 4, 8, 20}, {1, 4, 16, 8, 64}, {3, 6, 3, 5, 12},  {1, 2, 16, 2, 32}};
  for (const auto& p : all) {
    CAPTURE(p.min_n, p.max_n, p.width, p.num_tokens, p.tree_nodes);
    const SpeculativeSection config = ngram(p.min_n, p.max_n, p.width, p.num_tokens, p.tree_nodes);
    const auto plugin = make_proposer(config, nullptr, 16);
    NgramProposer in_process(static_cast<int32_t>(p.min_n), static_cast<int32_t>(p.max_n),
                             static_cast<int32_t>(p.width));
    const int32_t desc_nodes = p.width > 1 ? static_cast<int32_t>(p.tree_nodes ? p.tree_nodes : p.num_tokens * p.width)
                                           : 0;
    std::vector<std::vector<int32_t>> seqs(40);
    std::vector<DraftRequest> requests;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int32_t alphabet = 2 + below(6);  // small alphabets: many matches
      seqs[i].resize(static_cast<size_t>(1 + below(120)));
      for (auto& t : seqs[i]) t = below(alphabet);
      const int32_t depth = 1 + below(static_cast<int32_t>(p.num_tokens));
      const int32_t nodes = desc_nodes > 0 && i % 4 != 3 ? depth + below(desc_nodes - depth + 1) : 0;
      requests.push_back(DraftRequest{i, seqs[i], depth, 1000, nodes});
    }
    std::vector<DraftTree> got, in_process_trees;
    plugin->propose_trees(requests, got);
    in_process.propose_trees(requests, in_process_trees);
    size_t num_drafted = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      CAPTURE(i, seqs[i], requests[i].max_tokens, requests[i].max_nodes);
      const DraftTree want = reference(seqs[i], static_cast<int32_t>(p.min_n), static_cast<int32_t>(p.max_n),
                                       static_cast<int32_t>(p.width), requests[i].max_tokens, requests[i].max_nodes);
      CHECK(got[i].tokens == want.tokens);
      CHECK(got[i].parents == want.parents);
      CHECK(in_process_trees[i].tokens == want.tokens);
      CHECK(in_process_trees[i].parents == want.parents);
      num_drafted += got[i].empty() ? 0 : 1;
    }
    CHECK(num_drafted > 0);
    // Chains: the same requests through propose().
    std::vector<std::vector<int32_t>> chains, in_process_chains;
    plugin->propose(requests, chains);
    in_process.propose(requests, in_process_chains);
    CHECK(chains == in_process_chains);
  }
}

TEST_CASE("speculative.proposer names the plugin; a missing one, another kind or bad options are refused naming it",
          "[speculation][proposer]") {
  const auto refusal = [](const SpeculativeSection& s) {
    try {
      make_proposer(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  SpeculativeSection s = ngram(2, 4, 1);
  CHECK(refusal(s) == "accepted");
  CHECK(make_proposer(ngram(2, 4, 1, 4)) != nullptr);
  s.proposer = "proposer.nope";
  CHECK_THAT(refusal(s), Catch::StartsWith("speculative.proposer: plugin 'proposer.nope' not found; tried: ") &&
                             Catch::Contains("libllmk_proposer_nope.so"));
  s.proposer = "kv.paged";
  CHECK_THAT(refusal(s), Catch::StartsWith("speculative.proposer: plugin 'kv.paged' could not be loaded") &&
                             Catch::Contains("kind is kv_allocator, expected proposer"));
  s.proposer = "proposer.ngram";
  s.proposer_options = R"({"window": 3})";
  CHECK_THAT(refusal(s), Catch::StartsWith("speculative.proposer: plugin 'proposer.ngram' cannot serve") &&
                             Catch::Contains("unknown option 'window'"));
  // The engine's prompt lookup settings join the options.
  s.proposer_options = R"({"window": 3})";
  CHECK(nlohmann::json::parse(proposer_options_json(s)) ==
        nlohmann::json{{"window", 3}, {"prompt_lookup_min", 2}, {"prompt_lookup_max", 4}});
  CHECK(make_proposer(SpeculativeSection{}) == nullptr);  // method none
}

TEST_CASE("the configuration refuses an empty speculative.proposer and options that set prompt lookup's keys",
          "[speculation][proposer]") {
  const auto refused = [](const std::vector<std::string>& overrides) {
    try {
      load_config({}, overrides);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused({"speculative.method=ngram", "speculative.proposer=proposer.mine"}) == "accepted");
  CHECK_THAT(refused({"speculative.method=ngram", "speculative.proposer="}),
             Catch::StartsWith("speculative.proposer: must name a proposer plugin"));
  CHECK_THAT(refused({R"(speculative.proposer_options={"prompt_lookup_min": 1})"}),
             Catch::StartsWith("speculative.proposer_options: sets 'prompt_lookup_min'") &&
                 Catch::Contains("speculative.prompt_lookup_min"));
  CHECK_THAT(refused({"speculative.proposer_options=[1]"}),
             Catch::Contains("speculative.proposer_options: expected a JSON object"));
  CHECK(load_config({}, {}).speculative.proposer == "proposer.ngram");
}
