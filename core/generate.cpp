#include "core/generate.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "core/sampler.hpp"

namespace llmk {

namespace {

// A step of one sequence: tokens [first, first + ids.size()) of its context.
StepBatch single_sequence_step(const int32_t* ids, int32_t count, int32_t first, uint32_t context_capacity,
                               bool want_logits) {
  StepBatch b;
  b.token_ids.assign(ids, ids + count);
  for (int32_t i = 0; i < count; ++i) {
    b.positions.push_back(first + i);
    b.slot_mapping.push_back(first + i);
  }
  b.query_start = {0, count};
  b.context_lens = {first + count};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.block_size = static_cast<int32_t>(context_capacity);
  if (want_logits) b.logits_rows = {count - 1};
  return b;
}

}  // namespace

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                        const std::vector<int32_t>& eos_ids, const std::function<bool(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  const ModelRuntime& rt = model.runtime();
  const int32_t vocab = model.config().vocab_size;
  if (prompt_ids.empty()) throw Error(ErrorCode::invalid_argument, "generate: empty prompt (start from BOS)");
  const uint32_t capacity = std::min(rt.max_seq_len, rt.num_kv_slots);
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + std::max(0, params.max_tokens);
  if (total > capacity)
    throw Error(ErrorCode::invalid_argument, "generate: prompt (" + std::to_string(prompt_ids.size()) +
                                                 " tokens) + max_tokens (" + std::to_string(params.max_tokens) +
                                                 ") exceeds the context of " + std::to_string(capacity) + " tokens");
  GenerateResult result;
  if (params.max_tokens <= 0) {
    result.finish_reason = FinishReason::length;
    return result;
  }
  Sampler sampler(vocab, static_cast<int32_t>(rt.num_threads));
  const uint64_t seed = resolve_seed(params.seed);
  std::vector<float> logits(static_cast<size_t>(vocab));

  // Prefill in chunks; logits only for the prompt's last token.
  const auto t0 = clock::now();
  const int32_t n = static_cast<int32_t>(prompt_ids.size());
  for (int32_t first = 0; first < n;) {
    const int32_t count = std::min<int32_t>(n - first, static_cast<int32_t>(rt.max_step_tokens));
    model.forward(single_sequence_step(prompt_ids.data() + first, count, first, capacity, first + count == n),
                  logits.data());
    first += count;
  }
  auto t1 = clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  auto sample = [&]() {
    SamplerRow row;
    row.logits = logits.data();
    row.params = &params;
    row.prompt_ids = prompt_ids;
    row.generated_ids = result.token_ids;
    row.seed = seed;
    return sampler.sample_one(row).token_id;
  };
  int32_t position = n;
  while (true) {
    const int32_t id = sample();
    result.token_ids.push_back(id);
    if (result.token_ids.size() == 1) t1 = clock::now();
    const bool is_eos = !params.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end();
    const bool stop_id = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), id) !=
                         params.stop_token_ids.end();
    if (!on_token(id) || is_eos || stop_id) {
      result.finish_reason = FinishReason::stop;
      break;
    }
    if (static_cast<int32_t>(result.token_ids.size()) >= params.max_tokens) {
      result.finish_reason = FinishReason::length;
      break;
    }
    model.forward(single_sequence_step(&id, 1, position, capacity, true), logits.data());
    ++position;
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return result;
}

}  // namespace llmk
