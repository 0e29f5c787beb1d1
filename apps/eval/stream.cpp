#include "apps/eval/stream.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/executor.hpp"

namespace llmk::eval {
namespace {

constexpr int32_t kRowsPerCopy = 32;  // host logits held at once: rows * vocab floats

void bad(const std::string& what) { throw Error(ErrorCode::invalid_argument, "eval --stream: " + what); }

// Drops cache rows [sinks, sinks + count) of `length`, the later rows moved
// down: copies of at most `count` slots each, in order, so no copy's source
// overlaps its destination (a device copy need not be a memmove).
void evict(int32_t sinks, int32_t count, int32_t length, std::vector<llmk_kv_copy>& copies) {
  for (int32_t dst = sinks; dst + count < length; dst += count)
    copies.push_back({dst + count, dst, std::min(count, length - (dst + count))});
}

}  // namespace

EvalResult evaluate_stream(Executor& executor, const StreamRun& run, int32_t* peak_rows) {
  const ModelRuntime& rt = executor.runtime();
  const auto num_tokens = static_cast<int32_t>(run.tokens.size());
  if (num_tokens < 2) bad("the text has " + std::to_string(num_tokens) + " tokens, at least 2 are needed");
  if (run.window < 0 || run.sink_tokens < 0 || (run.window > 0 && run.sink_tokens >= run.window))
    bad("kv_cache.sink_tokens (" + std::to_string(run.sink_tokens) + ") must be below kv_cache.window (" +
        std::to_string(run.window) + ")");
  // Without a window the cache holds the whole stream.
  const int32_t capacity = run.window > 0 ? run.window : num_tokens;
  if (run.window == 0 && num_tokens > static_cast<int32_t>(rt.max_seq_len))
    bad(std::to_string(num_tokens) + " tokens exceed the context length of " + std::to_string(rt.max_seq_len) +
        " without kv_cache.window");
  if (rt.num_kv_slots < static_cast<uint64_t>(capacity))
    bad("the KV memory has " + std::to_string(rt.num_kv_slots) + " slots, the cache needs " +
        std::to_string(capacity));
  const int32_t batch = std::min({run.batch, static_cast<int32_t>(rt.max_step_tokens), capacity - run.sink_tokens});
  if (batch < 1) bad("--batch " + std::to_string(run.batch) + " leaves no token per step");
  const int32_t vocab = executor.model_config().vocab_size;

  EvalResult result;
  result.plan.ctx = num_tokens;
  result.plan.num_chunks = 1;
  result.plan.first_scored = 0;
  std::vector<float> logits(static_cast<size_t>(kRowsPerCopy) * vocab);
  const int32_t block = run.block_size;
  const int32_t num_blocks = (capacity + block - 1) / block;
  const auto t0 = std::chrono::steady_clock::now();
  int32_t length = 0;  // rows in the cache
  int64_t steps = 0;
  for (int32_t begin = 0; begin < num_tokens; begin += batch, ++steps) {
    const int32_t end = std::min(num_tokens, begin + batch), n = end - begin;
    StepBatch b;
    if (length + n > capacity) {
      const int32_t count = length + n - capacity;
      evict(run.sink_tokens, count, length, b.kv_copies);
      length -= count;
    }
    b.token_ids.assign(run.tokens.begin() + begin, run.tokens.begin() + end);
    for (int32_t p = begin; p < end; ++p) {
      b.positions.push_back(p);                  // in the text: the rotation
      b.slot_mapping.push_back(length + p - begin);  // in the cache
      if (p < num_tokens - 1) b.logits_rows.push_back(p - begin);
    }
    length += n;
    if (peak_rows != nullptr) *peak_rows = std::max(*peak_rows, length);
    b.query_start = {0, n};
    b.context_lens = {length};
    b.block_size = block;
    b.max_blocks_per_seq = num_blocks;
    for (int32_t k = 0; k < num_blocks; ++k) b.block_tables.push_back(k * block);
    const LogitsView view = executor.execute(b);
    for (int32_t r0 = 0; r0 < b.num_logits(); r0 += kRowsPerCopy) {
      const int32_t rows = std::min(kRowsPerCopy, b.num_logits() - r0);
      executor.copy_logits_to_host(view, r0, rows, logits.data());
      for (int32_t r = 0; r < rows; ++r) {
        const int32_t pos = begin + b.logits_rows[static_cast<size_t>(r0 + r)];
        const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab));
        result.nll.add(score_row(row, run.tokens[static_cast<size_t>(pos) + 1], {}).nll);
      }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run.on_progress && (steps % 64 == 63 || end == num_tokens)) run.on_progress(result);
  }
  result.chunks_done = 1;
  return result;
}

}  // namespace llmk::eval
