// Perplexity over a text, chunked as llama.cpp's llama-perplexity does it so
// the figures compare: the whole text is tokenized once (with the model's
// BOS in front when it adds one), cut into consecutive chunks of `ctx`
// tokens (a trailing partial chunk is dropped), each chunk's first token is
// replaced by BOS when the model adds one, every chunk runs from an empty
// context, and only the second half is scored: the logits at positions
// [ctx/2, ctx - 1) predicting the tokens at [ctx/2 + 1, ctx). The figure is
// exp(mean NLL) over all scored tokens; its +/- is ppl * the standard error
// of the mean NLL.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace llmk::eval {

struct ChunkPlan {
  int32_t ctx = 0;           // tokens per chunk
  int32_t num_chunks = 0;
  int32_t first_scored = 0;  // ctx / 2: the first position whose logits are scored
  int32_t bos_id = -1;       // replaces each chunk's first token when >= 0

  int32_t num_scored() const { return ctx - 1 - first_scored; }  // scored rows per chunk
  int64_t num_tokens() const { return static_cast<int64_t>(ctx) * num_chunks; }
};

// The chunking of `num_tokens` tokens: all full chunks, or the first
// `max_chunks` of them (-1: all). Throws Error(invalid_argument) when ctx is
// below 4 or the text has fewer than 2 * ctx tokens.
ChunkPlan plan_chunks(int64_t num_tokens, int32_t ctx, int32_t max_chunks, int32_t bos_id);

// Chunk `chunk`'s ids as the model sees them (the first one BOS when the
// plan has one). tokens must hold at least plan.num_tokens().
std::vector<int32_t> chunk_input(std::span<const int32_t> tokens, const ChunkPlan& plan, int32_t chunk);

// One scored row: the log-softmax of its logits in float64.
struct RowScore {
  double nll = 0;      // -log p(target)
  int32_t argmax = 0;  // the first id of the largest logit
};
// Scores `logits` [vocab] against `target`; when log_probs is not empty
// (size vocab) writes every id's log-probability there.
RowScore score_row(std::span<const float> logits, int32_t target, std::span<double> log_probs);

// Running sums of a per-token quantity.
struct MeanStats {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  void add(double v) { sum += v, sum2 += v * v, ++count; }
  double mean() const;
  double standard_error() const;  // of the mean; 0 below two values
};

// exp(mean NLL) and its uncertainty, ppl * standard error of the mean NLL.
double perplexity(const MeanStats& nll);
double perplexity_uncertainty(const MeanStats& nll);

}  // namespace llmk::eval
