// One sequence generated directly on a Model, without the scheduler: the
// prompt is prefilled in chunks of at most max_step_tokens, then one token
// is decoded per step, each sampled by the Sampler. The KV cache holds the
// sequence contiguously from slot 0 (a block table of one large block).
// The golden and model tests use it as a reference path free of the
// scheduler and actors; `llmk generate` and serving go through the Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/model.hpp"
#include "core/request.hpp"

namespace llmk {

struct GenerateResult {
  std::vector<int32_t> token_ids;  // generated, EOS included when it ended the sequence
  FinishReason finish_reason = FinishReason::none;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;     // after the first generated token
};

// on_token receives each generated id as soon as it is sampled; returning
// false stops generation (finish_reason stop). EOS ids end the sequence
// unless params.ignore_eos; params.max_tokens bounds its length.
// Throws Error(invalid_argument) when prompt + max_tokens exceeds the
// model's context or KV slots, or the prompt is empty.
GenerateResult generate(Model& model, const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                        const std::vector<int32_t>& eos_ids, const std::function<bool(int32_t)>& on_token);

}  // namespace llmk
