// Speculative decoding, the parts that know no scheduler: who proposes draft
// tokens, and which of them the model's own choices accept.
//
// A speculating decode feeds its newest token and k drafted ones in one step
// (1 + k query rows, every row with logits). Row i's choice is the model's
// next token after the newest token and drafts 0..i-1, so draft i is right
// exactly when it equals row i's choice. Greedy verification accepts drafts
// while they match; the first row that disagrees gives the token the model
// would have chosen there, and when all k match, the last row gives one more
// (the bonus token). The tokens emitted are row choices 0..a for a accepted
// drafts: exactly what k + 1 plain greedy steps would have produced. A
// sampled row verifies by the modified rejection rule for a draft proposed
// with certainty (SamplerRow::draft_token): it returns the draft with
// probability p(draft) and otherwise draws from p without it, so the same
// equality decides acceptance and every emitted token is distributed as
// plain sampling's (Leviathan et al. 2023; Chen et al. 2023).
//
// Proposers: the scheduler asks once per planned step for the drafts of
// every decode that may speculate, so a proposer that runs a model runs
// them as one batch (core/draft_proposer.hpp). Drafts are proposed with
// certainty (prompt lookup; a draft model's greedy choices), or drawn from
// the draft model's distribution q (speculative.draft_sampling sampled),
// which then goes with each draft to the rule for a full q
// (SamplerRow::draft_probs): the same equality still decides acceptance.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/config.hpp"
#include "core/request.hpp"
#include "core/sampler.hpp"

namespace llmk {

// One decode's wish for drafts in the step being planned.
struct DraftRequest {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens;  // prompt, then generated; the newest last
  int32_t max_tokens = 0;           // drafts wanted (> 0)
  int32_t max_total_tokens = 0;     // the sequence never grows past this
  // Token trees (propose_trees): most draft nodes; max_tokens is then the
  // most depth. 0: a chain of up to max_tokens.
  int32_t max_nodes = 0;
  // Set where drafts are drawn from the proposer's own distribution
  // (speculative.draft_sampling sampled, a sampled request): its sampling
  // parameters and seed; tokens[0, num_prompt_tokens) is the prompt.
  const SamplingParams* sampling = nullptr;
  uint64_t seed = 0;
  uint32_t sample_index = 0;
  int32_t num_prompt_tokens = 0;
};

// Drafts as a tree, in tree order: node j is tokens[j], a child of node
// parents[j] (< j), or of the sequence's newest token where that is -1. A
// chain of k drafts has parents -1, 0, ..., k - 2. Verification walks it
// from the newest token: each row's choice (core/speculation.hpp, top)
// picks the child holding that token, if any, to descend into; the emitted
// tokens are the choices along the path.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool empty() const { return tokens.empty(); }
  void clear() {
    tokens.clear();
    parents.clear();
  }
  bool is_chain() const;
  // The first num_nodes nodes (a tree again: parents come first).
  void keep(int32_t num_nodes);
  // depths[j] = 1 + depth of node j's parent (the newest token's children: 1).
  void depths(std::vector<int32_t>& out) const;
  static DraftTree chain(std::span<const int32_t> tokens);
};

// A draft's distribution q (SamplerRow::draft_probs), shared by the plan's
// rows until the step is verified.
using DraftProbs = std::shared_ptr<const std::vector<TokenProb>>;

class Proposer {
 public:
  virtual ~Proposer() = default;
  // out[i] receives up to requests[i].max_tokens drafts to follow
  // requests[i].tokens; none where the proposer has no guess. out is
  // resized to requests.size().
  virtual void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) = 0;
  // Trees: out[i] holds up to requests[i].max_nodes nodes no deeper than
  // max_tokens (a chain of up to max_tokens where max_nodes is 0). This
  // default proposes propose()'s chains.
  virtual void propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out);
  // The same, and probs[i][j] the distribution draft j of requests[i] was
  // drawn from, null where it was proposed with certainty (the default).
  virtual void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out,
                       std::vector<std::vector<DraftProbs>>& probs) {
    propose(requests, out);
    probs.assign(requests.size(), {});
  }
  // The sequence has ended: what the proposer keeps for it goes.
  virtual void release(uint64_t /*seq_id*/) {}
};

// Prompt lookup (n-gram) in process (core/prompt_lookup.hpp): the algorithm
// the plugin proposer.ngram runs, which make_proposer loads instead; kept as
// the reference its answers are checked against. As a tree where width > 1
// and a request's max_nodes > 0; a chain otherwise.
class NgramProposer final : public Proposer {
 public:
  // Throws Error(invalid_config) unless 1 <= min_n <= max_n and width >= 1.
  NgramProposer(int32_t min_n, int32_t max_n, int32_t width = 1);
  using Proposer::propose;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override;
  void propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) override;
  // One sequence's drafts, appended to out.
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const;
  // One sequence's tree; out is cleared first.
  void propose_tree(std::span<const int32_t> tokens, int32_t max_depth, int32_t max_nodes, DraftTree& out) const;

 private:
  int32_t min_n_, max_n_, width_;
};

class PluginRegistry;

// The proposer speculative.method names when it needs no model (ngram): the
// plugin speculative.proposer names (core/plugin_proposer.hpp), loaded from
// `plugins` (a registry of the default search path when null), told the
// vocabulary size (0: unknown). Null for "none", "draft" and "medusa"
// (build_engine_parts makes the draft model's, core/draft_proposer.hpp, and
// the heads', core/medusa_proposer.hpp, and hands it over in
// SchedulerOptions::proposer). A plugin that is missing, of another kind or
// of another API version is refused naming speculative.proposer.
std::unique_ptr<Proposer> make_proposer(const SpeculativeSection& config, PluginRegistry* plugins = nullptr,
                                        uint32_t vocab_size = 0);

// The speculation policy: whether a step with num_decodes decodes
// speculates under speculative.max_batch_size (0 never turns it down). The
// threshold is the batch size where a verification row stops costing less
// than the decode steps it saves, measured for the model and machine with
// `llmk bench` at growing concurrency (docs/speculative.md, "Policy").
inline bool speculation_pays(uint32_t max_batch_size, int32_t num_decodes) {
  return max_batch_size == 0 || num_decodes <= static_cast<int32_t>(max_batch_size);
}

// Greedy verification: choices[i] is row i's choice (i = 0..drafts.size()).
// Returns how many drafts are accepted: the emitted tokens are choices[0..a].
int32_t num_accepted_greedy(std::span<const int32_t> drafts, std::span<const int32_t> choices);

// Tree verification: choices[0] is the newest token's row's choice,
// choices[1 + j] node j's. From the newest token, the child whose token
// equals the current row's choice is descended into while there is one.
// Returns the accepted nodes, root side first: the emitted tokens are the
// choices of the newest token's row and of each accepted node's row.
std::vector<int32_t> accepted_path(const DraftTree& tree, std::span<const int32_t> choices);

}  // namespace llmk
