#include "core/speculation.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "core/config_checks.hpp"
#include "core/error.hpp"
#include "core/medusa_proposer.hpp"
#include "core/prompt_lookup.hpp"
#include "core/request.hpp"

namespace llmk {

bool DraftTree::is_chain() const {
  for (int32_t j = 0; j < size(); ++j)
    if (parents[static_cast<size_t>(j)] != j - 1) return false;
  return true;
}

void DraftTree::keep(int32_t num_nodes) {
  const auto n = static_cast<size_t>(std::clamp(num_nodes, 0, size()));
  tokens.resize(n);
  parents.resize(n);
}

void DraftTree::depths(std::vector<int32_t>& out) const {
  out.resize(tokens.size());
  for (size_t j = 0; j < tokens.size(); ++j)
    out[j] = parents[j] < 0 ? 1 : out[static_cast<size_t>(parents[j])] + 1;
}

DraftTree DraftTree::chain(std::span<const int32_t> tokens) {
  DraftTree t;
  t.tokens.assign(tokens.begin(), tokens.end());
  for (int32_t j = 0; j < t.size(); ++j) t.parents.push_back(j - 1);
  return t;
}

void Proposer::propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) {
  std::vector<std::vector<int32_t>> chains;
  propose(requests, chains);
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) out[i] = DraftTree::chain(chains[i]);
}

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n, int32_t width)
    : min_n_(min_n), max_n_(max_n), width_(width) {
  if (min_n < 1 || max_n < min_n)
    throw Error(ErrorCode::invalid_config, "speculative: prompt_lookup_min " + std::to_string(min_n) +
                                               " and prompt_lookup_max " + std::to_string(max_n) +
                                               " must satisfy 1 <= min <= max");
  if (width < 1)
    throw Error(ErrorCode::invalid_config, "speculative: tree_width " + std::to_string(width) + " must be at least 1");
}

void NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const {
  prompt_lookup::chain({min_n_, max_n_, width_}, tokens, max_tokens, out);
}

void NgramProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) {
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) propose(requests[i].tokens, requests[i].max_tokens, out[i]);
}

void NgramProposer::propose_tree(std::span<const int32_t> tokens, int32_t max_depth, int32_t max_nodes,
                                 DraftTree& out) const {
  prompt_lookup::tree({min_n_, max_n_, width_}, tokens, max_depth, max_nodes, out.tokens, out.parents);
}

void NgramProposer::propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) {
  out.resize(requests.size());
  std::vector<int32_t> chain;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    if (width_ > 1 && r.max_nodes > 0) {
      propose_tree(r.tokens, r.max_tokens, r.max_nodes, out[i]);
    } else {
      chain.clear();
      propose(r.tokens, r.max_tokens, chain);
      out[i] = DraftTree::chain(chain);
    }
  }
}

int32_t num_accepted_greedy(std::span<const int32_t> drafts, std::span<const int32_t> choices) {
  int32_t a = 0;
  while (static_cast<size_t>(a) < drafts.size() && static_cast<size_t>(a) < choices.size() &&
         drafts[static_cast<size_t>(a)] == choices[static_cast<size_t>(a)])
    ++a;
  return a;
}

std::vector<int32_t> accepted_path(const DraftTree& tree, std::span<const int32_t> choices) {
  std::vector<int32_t> path;
  int32_t at = -1;  // the newest token
  for (;;) {
    const int32_t choice = choices[static_cast<size_t>(at + 1)];
    int32_t next = -1;
    for (int32_t j = at + 1; j < tree.size() && next < 0; ++j)
      if (tree.parents[static_cast<size_t>(j)] == at && tree.tokens[static_cast<size_t>(j)] == choice) next = j;
    if (next < 0) return path;
    path.push_back(next);
    at = next;
  }
}

// The section's own ranges and what it cannot run beside (pipelined steps,
// the static policy). Both executors verify drafts.
void validate_speculative(const EngineConfig& c) {
  const SpeculativeSection& s = c.speculative;
  auto fail = [](const std::string& key, const std::string& why) {
    throw Error(ErrorCode::invalid_config, key + ": " + why);
  };
  if (s.method != "none" && s.method != "ngram" && s.method != "draft" && s.method != "medusa")
    fail("speculative.method", "'" + s.method + "' is not one of none, ngram, draft, medusa");
  if (s.draft_sampling != "greedy" && s.draft_sampling != "sampled")
    fail("speculative.draft_sampling", "'" + s.draft_sampling + "' is not one of greedy, sampled");
  // Prompt lookup and Medusa's heads propose with certainty: only a draft
  // model has a distribution q to draw from.
  if (s.draft_sampling == "sampled" && s.method != "draft")
    fail("speculative.draft_sampling", "sampled needs speculative.method draft (a draft model's q to draw from; it "
                                       "is '" + s.method + "')");
  if (s.method == "draft" && s.draft_model.empty())
    fail("speculative.draft_model", "is empty; speculative.method draft needs the draft model's path");
  if (s.method != "draft" && !s.draft_model.empty())
    fail("speculative.draft_model", "is set but speculative.method is '" + s.method + "' (set it to draft)");
  if (s.num_tokens < 1 || s.num_tokens > static_cast<uint32_t>(sampling_limits::max_speculative_tokens))
    fail("speculative.num_tokens", std::to_string(s.num_tokens) + " is out of range (allowed: 1 to " +
                                       std::to_string(sampling_limits::max_speculative_tokens) + ")");
  if (s.prompt_lookup_min < 1 || s.prompt_lookup_min > s.prompt_lookup_max)
    fail("speculative.prompt_lookup_min", std::to_string(s.prompt_lookup_min) +
                                              " must be at least 1 and at most speculative.prompt_lookup_max (" +
                                              std::to_string(s.prompt_lookup_max) + ")");
  if (s.tree_width < 1 || s.tree_width > 16)
    fail("speculative.tree_width", std::to_string(s.tree_width) + " is out of range (allowed: 1 to 16)");
  if (s.tree_width > 1 && s.method != "ngram")
    fail("speculative.tree_width", std::to_string(s.tree_width) + " needs speculative.method ngram (it is '" +
                                       s.method + "')");
  if (s.tree_nodes != 0 && (s.tree_nodes < s.num_tokens ||
                            s.tree_nodes > static_cast<uint32_t>(sampling_limits::max_speculative_tokens)))
    fail("speculative.tree_nodes", std::to_string(s.tree_nodes) + " is out of range (allowed: 0, or speculative." +
                                       "num_tokens (" + std::to_string(s.num_tokens) + ") to " +
                                       std::to_string(sampling_limits::max_speculative_tokens) + ")");
  validate_medusa(c);
  if (s.prompt_lookup_max > 64)
    fail("speculative.prompt_lookup_max", std::to_string(s.prompt_lookup_max) + " is out of range (allowed: up to 64)");
  if (s.method == "ngram" && s.proposer.empty())
    fail("speculative.proposer", "must name a proposer plugin (e.g. proposer.ngram)");
  config_detail::check_json_object(s.proposer_options, "speculative.proposer_options");
  const auto options = nlohmann::json::parse(s.proposer_options);
  for (const char* key : {"prompt_lookup_min", "prompt_lookup_max"})
    if (options.contains(key))
      fail("speculative.proposer_options",
           std::string("sets '") + key + "', which the engine passes from speculative." + key + " (set it there)");
  if (s.method == "none") return;
  if (c.parallel.pipeline > 1 && c.parallel.steps_in_flight != 1)
    fail("speculative.method", "'" + s.method + "' does not run with pipelined steps in flight (parallel.pipeline " +
                                   std::to_string(c.parallel.pipeline) + ", parallel.steps_in_flight " +
                                   std::to_string(c.parallel.steps_in_flight) + "; set it to 1)");
  if (c.scheduler.policy != "continuous")
    fail("speculative.method", "'" + s.method + "' needs scheduler.policy continuous (it is '" + c.scheduler.policy +
                                   "')");
}

}  // namespace llmk
