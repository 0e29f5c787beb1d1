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
// Proposers are an internal interface for now: prompt lookup needs nothing
// but the sequence's tokens; a draft model will need the executor, and with
// it a plugin kind of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/config.hpp"

namespace llmk {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Appends up to max_tokens drafts to follow `tokens` (prompt, then
  // generated) to out; none when it has no guess.
  virtual void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const = 0;
};

// Prompt lookup (n-gram): the last n tokens, for n from max_n down to min_n,
// are looked for earlier in the sequence (prompt and output alike); at the
// latest earlier occurrence found, the tokens that followed it are the
// drafts, as many as there are up to max_tokens.
class NgramProposer final : public Proposer {
 public:
  // Throws Error(invalid_config) unless 1 <= min_n <= max_n.
  NgramProposer(int32_t min_n, int32_t max_n);
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override;

 private:
  int32_t min_n_, max_n_;
};

// The proposer speculative.method names; null for "none".
std::unique_ptr<Proposer> make_proposer(const SpeculativeSection& config);

// Greedy verification: choices[i] is row i's choice (i = 0..drafts.size()).
// Returns how many drafts are accepted: the emitted tokens are choices[0..a].
int32_t num_accepted_greedy(std::span<const int32_t> drafts, std::span<const int32_t> choices);

}  // namespace llmk
