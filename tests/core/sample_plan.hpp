// One step's rows sampled as the sampler actor samples them, for tests that
// drive a Scheduler and a Model by hand: each logits row of the plan with
// its sequence's prompt and generated tokens as history, its seed and its
// sample index.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/sampler.hpp"
#include "core/scheduler.hpp"

namespace llmk::test {

inline std::vector<SampledToken> sample_rows(const Scheduler& sched, Sampler& sampler, const StepPlan& plan,
                                             const std::vector<float>& logits, int32_t vocab) {
  std::vector<SampledToken> out;
  for (size_t i = 0; i < plan.logits.size(); ++i) {
    const LogitsTarget& t = plan.logits[i];
    const Sequence& seq = *sched.sequence(t.seq_id);
    SamplerRow row;
    row.logits = logits.data() + i * static_cast<size_t>(vocab);
    row.params = t.sampling.get();
    row.prompt_ids = std::span<const int32_t>(seq.tokens.data(), static_cast<size_t>(seq.num_prompt_tokens));
    row.generated_ids = std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens,
                                                 static_cast<size_t>(seq.num_generated_tokens()));
    row.seed = *t.sampling->seed;
    row.sample_index = static_cast<uint32_t>(t.sample_index);
    out.push_back(sampler.sample_one(row));
  }
  return out;
}

}  // namespace llmk::test
