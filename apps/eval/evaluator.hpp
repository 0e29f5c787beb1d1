// Runs a chunk plan (apps/eval/perplexity.hpp) through an Executor: each
// chunk from an empty context at KV slots [0, ctx), `batch` tokens per
// step, the logits of every scored position copied to the host and scored
// in float64. Optionally saves every scored row (--save-logits) and compares
// each with a saved base run's row (--kl-base): KL(base || this), top-1
// agreement, and the base's own perplexity from its saved NLLs.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "apps/eval/logits_file.hpp"
#include "apps/eval/perplexity.hpp"

namespace llmk {
class Executor;
}

namespace llmk::eval {

struct EvalResult {
  ChunkPlan plan;
  int32_t chunks_done = 0;
  MeanStats nll;       // this run's -log p(next token)
  bool has_base = false;
  MeanStats base_nll;  // the base run's, read from its file
  MeanStats kl;        // KL(base || this) per scored row
  std::vector<float> kl_values;
  int64_t same_top = 0;  // rows whose argmax equals the base's
  double seconds = 0;

  double kl_median() const;
  double kl_max() const;
  double top1_agreement() const;  // fraction of scored rows
};

struct EvalRun {
  std::span<const int32_t> tokens;  // the whole text's ids
  ChunkPlan plan;
  int32_t batch = 512;       // tokens per step (at most the executor's step size)
  int32_t block_size = 16;   // the KV layout's block size
  LogitsWriter* save = nullptr;
  LogitsReader* base = nullptr;  // identity already checked against this run
  std::function<void(const EvalResult&)> on_chunk;  // after each chunk
};

// Throws what the executor throws, and Error(invalid_argument) when the
// executor's context or KV memory is shorter than ctx.
EvalResult evaluate(Executor& executor, const EvalRun& run);

}  // namespace llmk::eval
