// Medusa heads as a Proposer (speculative.method medusa; heads:
// core/medusa_heads.hpp).
//
// The heads read the target's own hidden state: the final-RMSNorm row of
// the sequence's newest verified position, which the executor hands back
// with each step's ids (Executor::copy_hidden_rows) and the scheduler
// passes on with observe() once it knows which row that is: a plain
// step's logits row, or after a verification the row of the last accepted
// draft (the newest token's own row where none was accepted), never merely
// the last row computed. That row's lm_head chose the sequence's newest
// token (position t + 1); head i proposes the token at t + 2 + i.
//
// Trees (DraftRequest::max_nodes > 0): every node at depth d + 1 holds one
// of head d's top-k tokens (Medusa's Cartesian-product tree, since each
// head reads the same hidden state). With speculative.medusa_choices the
// tree is that fixed list of paths (Medusa's "medusa_choices": [[0], [0,
// 0], [1], ...], path [a, b] = head 0's top-(a+1) token, then head 1's
// top-(b+1)), cut to max_nodes after sorting by depth as Medusa does; else
// the max_nodes nodes of the top-k product tree with the highest product of
// head probabilities, found best-first. A chain (no trees) is each head's
// top-1. A sequence without a current hidden row (its last step handed none
// back) gets no drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.hpp"
#include "core/medusa_heads.hpp"
#include "core/model_config.hpp"
#include "core/speculation.hpp"

namespace llmk {

class MedusaProposer final : public Proposer {
 public:
  // top_k: candidates per head in the product tree (>= 1); choices: a fixed
  // tree as Medusa's paths, every path's prefixes in it too (empty: the
  // product tree).
  MedusaProposer(std::shared_ptr<const MedusaHeads> heads, int32_t top_k,
                 std::vector<std::vector<int32_t>> choices = {});

  using Proposer::propose;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override;
  void propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) override;
  void release(uint64_t seq_id) override;

  // The target's final-RMSNorm hidden row at sequence position `position`
  // (the row whose logits chose the token at position + 1). Drafts follow a
  // sequence whose tokens end at position + 1 only.
  void observe(uint64_t seq_id, int32_t position, std::span<const float> hidden);

  // The row kept for seq_id (nullptr: none) and its position.
  const std::vector<float>* hidden_of(uint64_t seq_id, int32_t& position) const;
  const MedusaHeads& heads() const { return *heads_; }
  // Nodes of the fixed tree (0 without medusa_choices).
  int32_t num_choices() const { return static_cast<int32_t>(choices_.size()); }

 private:
  struct Candidates;
  // The top `k` of each of the first `depth` heads for every request with a
  // current hidden row (requests without one get depth 0).
  void rank(std::span<const DraftRequest> requests, int32_t k, std::vector<Candidates>& out);
  void tree_from_choices(const Candidates& c, int32_t max_nodes, DraftTree& out) const;
  void best_first_tree(const Candidates& c, int32_t max_nodes, DraftTree& out) const;

  std::shared_ptr<const MedusaHeads> heads_;
  int32_t top_k_ = 1;
  std::vector<std::vector<int32_t>> choices_;  // sorted by (depth, path)
  std::vector<int32_t> choice_parents_;        // choices_[j]'s parent among them (-1: the newest token)
  int32_t choice_top_k_ = 0;                   // 1 + the largest rank a choice names
  struct Seen {
    int32_t position = -1;
    std::vector<float> hidden;
  };
  std::unordered_map<uint64_t, Seen> seen_;
  std::vector<float> x_, logits_, scratch_;  // scratch of one propose call
};

// Parses speculative.medusa_choices (JSON: a list of paths, each a list of
// ranks >= 0; "" for none), checking every path's prefixes are listed and
// no path repeats. Throws Error(invalid_config) naming the key.
std::vector<std::vector<int32_t>> parse_medusa_choices(const std::string& text);

// The checks of the medusa keys that need no file (validate_speculative
// calls it): paths and tree shapes, the executor that hands hidden rows
// back. Throws Error(invalid_config) naming the key.
void validate_medusa(const EngineConfig& config);

// Loads speculative.medusa_heads against the target and builds the
// proposer. Throws Error(invalid_config) naming the key.
std::unique_ptr<MedusaProposer> make_medusa_proposer(const SpeculativeSection& config, const ModelConfig& target);

}  // namespace llmk
