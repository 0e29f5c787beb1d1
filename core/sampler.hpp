// Token sampling, once per step over a batch of logits rows.
//
// Per row, in this order (HF and vLLM agree on it):
//   1. repetition penalty over the distinct tokens of prompt + generated
//      (HF: a positive logit is divided by the penalty, a negative one multiplied);
//   2. frequency and presence penalties over the generated tokens (OpenAI:
//      logit -= frequency * count + presence * (count > 0));
//   3. temperature: logits / T; T < kGreedyTemperature means greedy (argmax,
//      ties to the lowest id), and steps 4-6 are skipped;
//   4. top-k: the k best tokens (ties to the lowest id);
//   5. top-p: the shortest run of those, best first, whose probability
//      (renormalised over the top-k set) sums to at least top_p;
//   6. min-p: of those, the tokens with probability >= min_p * the best one's;
//   7. one draw from what is left, proportional to exp(logit / T): the
//      first token, walking the kept ones best first (ties lowest id first;
//      the whole vocabulary in id order when steps 4-6 keep everything),
//      whose cumulative weight exceeds u times their total.
//
// Logprobs are the log-softmax over the whole vocabulary of the logits after
// steps 1-3 (penalties and temperature; greedy rows use T = 1), before the
// truncation of steps 4-6: every listed logprob is finite, and with no
// penalties and T = 1 they are the model's own distribution. (vLLM returns
// the raw model distribution by default.)
//
// Randomness is counter-based: the draw for a sample's g-th generated token
// is a hash of (seed, sample index, g), so a seeded request gives the same
// tokens whatever else shares its batches, and after a preemption.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/request.hpp"

namespace llmk {

constexpr float kGreedyTemperature = 1e-5f;  // below this, sampling is greedy
constexpr int32_t kMaxLogprobs = sampling_limits::max_logprobs;  // most top logprobs a request may ask for
// The Sampler assumes params that passed validate_sampling_params (core/request.hpp).

// The request's seed, or a fresh random one when it has none. Called once
// per request; its samples share it and differ by sample index.
uint64_t resolve_seed(const std::optional<uint64_t>& seed);

// The uniform number in [0, 1) behind a sample's draw at `step`.
double sampler_uniform(uint64_t seed, uint32_t sample_index, uint64_t step);
// The same for a draft model's draws (speculative.draft_sampling sampled):
// a stream of its own, independent of the target's draws at every step.
double draft_uniform(uint64_t seed, uint32_t sample_index, uint64_t step);

// One token's probability in a processed distribution (step 7's: after
// penalties, temperature and truncation, normalised).
struct TokenProb {
  int32_t id = -1;
  float prob = 0.0f;
};
// A draw from such a distribution with uniform u: the first token, in the
// order given, whose cumulative probability exceeds u times the total (the
// last token with probability > 0 should rounding leave it unreached).
int32_t draw_from(std::span<const TokenProb> dist, double u);

// True when the sampler's choice for `params` is the argmax of the raw
// logits: greedy, no penalty changes a logit, and no grammar masks one. Such a row's token can be
// picked wherever the logits are (the CPU executor does, so that the next
// step need not wait for the sampler: actors/step_feedback.hpp).
bool chooses_raw_argmax(const SamplingParams& params);

// The greedy choice over a run of logits, the way the Sampler makes it:
// the largest value, ties to the lowest index, NaNs skipped. A row may be
// cut into parts scanned apart (on several threads) and merged: merging the
// parts in any order gives the whole row's greedy_token.
struct ArgmaxPart {
  float max = -std::numeric_limits<float>::infinity();
  int32_t index = -1;  // the first index holding `max`; -1: none (every value NaN)
};
ArgmaxPart argmax_part(const float* logits, int32_t begin, int32_t end);
ArgmaxPart merge_argmax(ArgmaxPart a, ArgmaxPart b);
// The whole row's choice (0 when every logit is NaN).
inline int32_t argmax_token(ArgmaxPart whole) { return whole.index < 0 ? 0 : whole.index; }
int32_t greedy_token(const float* logits, int32_t vocab_size);

struct SamplerRow {
  const float* logits = nullptr;            // [vocab_size] raw model logits, read only
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_ids;      // for the repetition penalty
  std::span<const int32_t> generated_ids;   // this sample's tokens so far; its size is the step
  uint64_t seed = 0;                        // from resolve_seed
  uint32_t sample_index = 0;                // 0..n-1
  // Speculative verification (core/speculation.hpp): a token drafted with
  // certainty for this position. A sampled row returns it with probability
  // p(draft) and otherwise draws from p without it, so the row's token is
  // distributed as p and equals the draft exactly when it is accepted (the
  // modified rejection rule for a point-mass draft). A greedy row returns
  // its argmax as always. -1: none.
  int32_t draft_token = -1;
  // The distribution q the draft was drawn from (a draft model sampling,
  // core/draft_proposer.hpp), its tokens with q > 0; empty: proposed with
  // certainty. A sampled row then accepts the draft x with probability
  // min(1, p(x)/q(x)) and otherwise draws from the normalised max(0, p - q),
  // which is 0 at x whenever x can be rejected (p(x) < q(x)): the row's id
  // equals the draft exactly when it is accepted, and is distributed as p.
  std::span<const TokenProb> draft_probs;
};

struct SampledToken {
  int32_t token_id = -1;
  bool has_logprobs = false;  // params->logprobs >= 0
  TokenLogprob logprobs;      // chosen token's logprob, then the top params->logprobs
};

class Sampler {
 public:
  // max_threads: OpenMP threads for large batches (0 = OpenMP's default).
  explicit Sampler(int32_t vocab_size, int32_t max_threads = 0);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Samples every row; out[i] belongs to rows[i] (out.size() >= rows.size()).
  // Reusing `out` across steps reuses the logprob vectors' storage. Rows are
  // spread over threads when the batch is large enough to pay for it.
  void sample(std::span<const SamplerRow> rows, std::span<SampledToken> out);
  SampledToken sample_one(const SamplerRow& row);

  // For tests and debugging. The logits after penalties and temperature
  // (steps 1-3). [vocab_size]
  void processed_logits(const SamplerRow& row, std::span<float> out);
  // The tokens step 7 draws from, best first (the argmax alone when greedy).
  std::vector<int32_t> candidates(const SamplerRow& row);
  // Those tokens with their probabilities (normalised over them; the argmax
  // with 1 when greedy), best first, tokens of probability 0 left out.
  void distribution(const SamplerRow& row, std::vector<TokenProb>& out);

  int32_t vocab_size() const { return vocab_size_; }

 private:
  struct Scratch;
  void sample_row(const SamplerRow& row, Scratch& scratch, SampledToken& out) const;
  void fill_candidates(const SamplerRow& row, Scratch& scratch) const;
  static void all_candidates(const float* z, Scratch& scratch, int32_t vocab);

  int32_t vocab_size_;
  int32_t num_threads_;
  std::vector<std::unique_ptr<Scratch>> scratch_;  // one per thread
};

}  // namespace llmk
