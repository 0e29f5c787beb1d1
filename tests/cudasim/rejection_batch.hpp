// The device side of the CUDA sampler's 10^5-draw rejection tests
// (test_sampling_speculation.cpp, test_sampling_draft_q.cpp): the shared
// rejection logits (tests/support/speculation_cases.hpp) repeated as one row
// per draw, a workspace, the sampled ids, and the history as penalty slot
// 0's generated counts (no prompt). Starting a batch resets the simulator
// and turns its shared-memory race check off: 10^5 blocks through a kernel
// whose token-for-token cases keep the check on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sampling.hpp"
#include "support/speculation_cases.hpp"
#include "test_support.hpp"

namespace llmk::cudasim_test {

struct RejectionBatch {
  int32_t vocab = llmk::test::kRejectionVocab;
  std::vector<float> raw = llmk::test::rejection_logits();
  std::vector<int32_t> history = llmk::test::rejection_history();
  int64_t draws = llmk::test::kRejectionDraws;
  device_buffer<float> logits, workspace;
  device_buffer<int32_t> tokens, counts;
  device_buffer<uint32_t> prompt_mask;

  RejectionBatch()
      : logits(start(repeated())),
        workspace(static_cast<size_t>(draws) * static_cast<size_t>(vocab)),
        tokens(static_cast<size_t>(draws)),
        counts(history_counts()),
        prompt_mask(std::vector<uint32_t>(static_cast<size_t>(llmk::cuda::prompt_mask_words(vocab)), 0u)) {}

  llmk::cuda::PenaltyState penalties() const { return {counts.get(), prompt_mask.get(), 1, vocab}; }

 private:
  std::vector<float> repeated() const {
    std::vector<float> out(static_cast<size_t>(draws) * static_cast<size_t>(vocab));
    for (int64_t d = 0; d < draws; ++d) std::copy(raw.begin(), raw.end(), out.begin() + d * vocab);
    return out;
  }
  std::vector<int32_t> history_counts() const {
    std::vector<int32_t> out(static_cast<size_t>(vocab), 0);
    for (const int32_t id : history) ++out[static_cast<size_t>(id)];
    return out;
  }
  static std::vector<float> start(std::vector<float> rows) {
    reset_simulator(1);
#if !LLMK_CUDA_NATIVE
    cudasim::set_race_mode(cudasim::race_mode::off);
#endif
    return rows;
  }
};

}  // namespace llmk::cudasim_test
