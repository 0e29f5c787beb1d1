// `llmk eval --stream`: one sequence over the whole text, StreamingLLM style
// (Xiao et al. 2023). The cache holds at most `window` K/V rows at slots
// [0, window): the first `sink_tokens` of the text, then the newest ones.
// Before a step whose tokens would not fit, the oldest rows after the sinks
// are evicted and the rest moved down (KV copies the executor performs), so
// the KV memory stays at `window` rows however long the text. Each token is
// rotated by its position in the text and each query also by its position
// in the cache, for the sinks (core/model.cpp); every position but the last
// is scored. With window 0 nothing is evicted: full attention over the
// stream, the baseline (the text must then fit the context length).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "apps/eval/evaluator.hpp"

namespace llmk::eval {

struct StreamRun {
  std::span<const int32_t> tokens;  // the stream, BOS first when the model adds one
  int32_t window = 0;               // K/V rows kept, sinks included; 0: all of them
  int32_t sink_tokens = 0;
  int32_t batch = 64;               // tokens per step (at most window - sink_tokens)
  int32_t block_size = 16;          // the KV layout's block size
  std::function<void(const EvalResult&)> on_progress;  // every 64 steps and at the end
};

// The result's plan is one chunk of the whole stream, scored from position 0.
// Records the most K/V rows the cache ever held in *peak_rows when given.
// Throws Error(invalid_argument) when the executor's KV memory or context is
// too small, or the settings contradict each other.
EvalResult evaluate_stream(Executor& executor, const StreamRun& run, int32_t* peak_rows = nullptr);

}  // namespace llmk::eval
