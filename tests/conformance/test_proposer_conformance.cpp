// Proposer plugins: every one discovery finds keeps llmk_proposer.h's rules
// (conformance/proposer_suite.cpp); the suite fails each fixture that breaks
// one, on the case that rule belongs to; speculative.proposer loads a team's
// own plugin, refuses another API major naming the key, and the host drops
// (never uses) an answer that breaks a rule (fixtures/proposer_fixture.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "core/error.hpp"
#include "core/plugin_proposer.hpp"

using namespace llmk;
using namespace llmk::conformance;

namespace {

SuiteResult run_fixture(const std::string& name) {
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  return run_proposer_suite(registry.load(name, LLMK_PLUGIN_PROPOSER));
}

SpeculativeSection with_proposer(const std::string& name, uint32_t tree_width = 1) {
  SpeculativeSection s;
  s.method = "ngram";
  s.num_tokens = 4;
  s.prompt_lookup_min = 1;
  s.prompt_lookup_max = 3;
  s.tree_width = tree_width;
  s.proposer = name;
  return s;
}

}  // namespace

TEST_CASE("every discovered proposer plugin keeps the rules of its answers", "[conformance][proposer]") {
  PluginRegistry registry(conformance_dirs());
  const auto names = discover_plugins(registry, LLMK_PLUGIN_PROPOSER);
  REQUIRE(std::find(names.begin(), names.end(), "proposer.ngram") != names.end());
  for (const auto& name : names) {
    CAPTURE(name);
    const SuiteResult r = run_proposer_suite(registry.load(name, LLMK_PLUGIN_PROPOSER));
    for (const auto& f : r.failures()) FAIL_CHECK(f);
    CHECK(r.num_passed() == 13);  // four cases for each of three shapes, and the edge requests
  }
}

TEST_CASE("proposer.ngram drafts in every shape of the suite's workload", "[conformance][proposer]") {
  PluginRegistry registry;
  const SuiteResult r = run_proposer_suite(registry.load("proposer.ngram", LLMK_PLUGIN_PROPOSER));
  REQUIRE(r.notes.size() == 3);
  for (const auto& note : r.notes) {
    INFO(note);
    CHECK_THAT(note, !Catch::Contains("drafted for 0 of"));  // prompt lookup finds the recurring phrases
  }
}

TEST_CASE("a proposer that keeps every rule conforms, and one that breaks a rule fails the case it belongs to",
          "[conformance][proposer]") {
  const SuiteResult echo = run_fixture("proposer.echo");
  for (const auto& f : echo.failures()) FAIL_CHECK(f);
  CHECK(echo.conformant());

  struct Broken {
    const char* name;
    const char* failing_case;  // a case name that must fail
    const char* detail;        // what its detail must say
  };
  const Broken broken[] = {
      {"proposer.childfirst", "trees of width 4, depth 4, up to 16 nodes, 48 sequences in one call",
       "node 0's parent 1 is not before it"},
      {"proposer.toodeep", "trees of width 16, depth 8, up to 64 nodes, 48 sequences in one call",
       "deeper than max_depth"},
      {"proposer.outofvocab", "chains of up to 4, 48 sequences in one call", "outside the vocabulary [0, 64)"},
      {"proposer.fickle", "chains of up to 4: the same call again, and on a second proposer, answers the same",
       "asked again: sequence"},
      {"proposer.strictrelease", "chains of up to 4: releases of unknown, ended and twice-ended ids are harmless",
       "an id never proposed for: release of 0 returned status 1"},
  };
  for (const auto& b : broken) {
    CAPTURE(b.name);
    const SuiteResult r = run_fixture(b.name);
    CHECK_FALSE(r.conformant());
    bool found = false;
    for (const auto& c : r.cases) {
      if (c.name != b.failing_case) continue;
      found = true;
      CHECK(c.status == CaseStatus::failed);
      CHECK_THAT(c.detail, Catch::Contains(b.detail));
    }
    CHECK(found);
  }
  // Chains alone keep the rules the tree bugs break.
  for (const char* name : {"proposer.childfirst", "proposer.toodeep"}) {
    CAPTURE(name);
    const SuiteResult r = run_fixture(name);
    for (const auto& c : r.cases)
      if (c.name.rfind("chains", 0) == 0) CHECK(c.status == CaseStatus::passed);
  }
}

TEST_CASE("speculative.proposer swaps in a team's own proposer plugin", "[conformance][proposer]") {
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  const auto proposer = make_proposer(with_proposer("proposer.echo"), &registry, 64);
  REQUIRE(proposer != nullptr);
  const std::vector<int32_t> tokens{3, 1, 4, 1, 5};
  std::vector<std::vector<int32_t>> out;
  proposer->propose(std::vector<DraftRequest>{DraftRequest{9, tokens, 3, 100, 0}}, out);
  CHECK(out.at(0) == std::vector<int32_t>{5, 1, 4});  // proposer.echo reads the sequence backwards
}

TEST_CASE("a proposer plugin of another major API version is refused naming speculative.proposer and both versions",
          "[conformance][proposer][api_version]") {
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  CHECK_THROWS_WITH(make_proposer(with_proposer("proposer.newmajor"), &registry, 64),
                    Catch::StartsWith("speculative.proposer: plugin 'proposer.newmajor' could not be loaded") &&
                        Catch::Contains("proposer API version 2.0, engine has 1.0 (a different major version is not "
                                        "compatible)"));
}

TEST_CASE("the host drops a proposer's answers that break a rule and decodes those sequences without drafts",
          "[conformance][proposer]") {
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  auto proposer = make_proposer(with_proposer("proposer.childfirst", 4), &registry, 64);
  auto* plugin = dynamic_cast<PluginProposer*>(proposer.get());
  REQUIRE(plugin != nullptr);
  const std::vector<int32_t> tokens{3, 1, 4, 1, 5};
  std::vector<DraftTree> trees;
  const std::vector<DraftRequest> requests{DraftRequest{9, tokens, 3, 100, 16}, DraftRequest{10, tokens, 3, 100, 0}};
  plugin->propose_trees(requests, trees);
  REQUIRE(trees.size() == 2);
  CHECK(trees[0].empty());  // the tree put a child first: dropped
  CHECK(trees[1].tokens == std::vector<int32_t>{5, 1, 4});  // the chain kept the rules
  CHECK(plugin->num_dropped() == 1);
  CHECK_THAT(plugin->last_drop_reason(), Catch::Contains("sequence 9: node 0's parent 1 is not before it"));

  auto deep = make_proposer(with_proposer("proposer.outofvocab"), &registry, 64);
  std::vector<std::vector<int32_t>> chains;
  deep->propose(std::vector<DraftRequest>{DraftRequest{11, tokens, 3, 100, 0}}, chains);
  CHECK(chains.at(0).empty());
  CHECK_THAT(dynamic_cast<PluginProposer&>(*deep).last_drop_reason(),
             Catch::Contains("token 64 is outside the vocabulary [0, 64)"));
}
