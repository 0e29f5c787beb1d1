// Steps for the simulated CUDA executor's tensor-parallel tests, started by
// mpirun: every sequence s in its own slot range [128 s, 128 s + 128), a
// prefill of whole prompts and greedy decode steps, and the logits rows
// copied to the host. Catch2's REQUIRE reports a failed CUDA call.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/executor.hpp"
#include "support/golden.hpp"

namespace llmk::test::cuda_tp {

constexpr int32_t kSlotsPerSequence = 128;

// The step's logits rows [num_logits, vocab], on the host.
inline std::vector<float> run(Executor& executor, const StepBatch& b, const SampledIds& previous = {}) {
  const LogitsView view = executor.execute(b, previous);
  REQUIRE(view.device == Device::cuda);
  REQUIRE(view.num_rows == b.num_logits());
  if (view.ready.event != nullptr)
    REQUIRE(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)) == cudaSuccess);
  std::vector<float> host(static_cast<size_t>(view.num_rows) * view.vocab_size);
  for (int32_t r = 0; r < view.num_rows; ++r)
    REQUIRE(cudaMemcpy(host.data() + static_cast<size_t>(r) * view.vocab_size, view.row(r),
                       static_cast<size_t>(view.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// The prompts as one prefill, logits at each one's last row.
inline StepBatch prefill(const std::vector<std::vector<int32_t>>& tokens) {
  StepBatch b;
  b.block_size = kSlotsPerSequence;
  b.max_blocks_per_seq = 1;
  b.query_start = {0};
  for (int32_t s = 0; s < static_cast<int32_t>(tokens.size()); ++s) {
    for (size_t p = 0; p < tokens[s].size(); ++p) {
      b.token_ids.push_back(tokens[s][p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(kSlotsPerSequence * s + static_cast<int32_t>(p));
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(static_cast<int32_t>(tokens[s].size()));
    b.block_tables.push_back(kSlotsPerSequence * s);
    b.logits_rows.push_back(b.num_tokens() - 1);
  }
  return b;
}

// The next decode of every sequence: its last token.
inline StepBatch decode(const std::vector<std::vector<int32_t>>& tokens) {
  StepBatch b;
  b.block_size = kSlotsPerSequence;
  b.max_blocks_per_seq = 1;
  b.query_start = {0};
  for (int32_t s = 0; s < static_cast<int32_t>(tokens.size()); ++s) {
    const auto pos = static_cast<int32_t>(tokens[s].size() - 1);
    b.token_ids.push_back(tokens[s].back());
    b.positions.push_back(pos);
    b.slot_mapping.push_back(kSlotsPerSequence * s + pos);
    b.query_start.push_back(s + 1);
    b.context_lens.push_back(pos + 1);
    b.block_tables.push_back(kSlotsPerSequence * s);
    b.logits_rows.push_back(s);
  }
  return b;
}

// Every step's logits [sequences, vocab], step 0 the prefill, and the
// tokens fed: [sequence] prompt + generated ids.
struct Run {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

// Prefill, then num_decodes decodes. With `forced` (another run's tokens),
// every step feeds those; else each step feeds its own argmax.
inline Run generate(Executor& executor, std::vector<std::vector<int32_t>> tokens, int32_t num_decodes,
                    const Run* forced) {
  Run out;
  const int32_t vocab = executor.model_config().vocab_size;
  out.logits.push_back(run(executor, prefill(tokens)));
  for (int32_t step = 1; step <= num_decodes; ++step) {
    for (size_t s = 0; s < tokens.size(); ++s) {
      const size_t at = tokens[s].size();
      tokens[s].push_back(forced != nullptr ? forced->tokens[s][at]
                                            : argmax(out.logits.back().data() + s * vocab, vocab));
    }
    out.logits.push_back(run(executor, decode(tokens)));
  }
  out.tokens = tokens;
  return out;
}

}  // namespace llmk::test::cuda_tp
