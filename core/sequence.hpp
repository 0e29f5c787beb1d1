// One sample of one request as the scheduler tracks it: its tokens, how much
// of its K/V is valid, its state and its timestamps. Plain data plus the stop
// rule; the Scheduler owns every Sequence and is the only one to change it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/request.hpp"

namespace llmk {

using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;
// The scheduler's clock; tests inject a manual one.
using ClockFn = std::function<TimePoint()>;

enum class SequenceStatus {
  waiting,    // queued, holds no KV
  running,    // holds KV; prefilling while num_computed_tokens < num_tokens() - 1
  preempted,  // back in the waiting queue after losing its KV (or with it saved to host)
  finished,
};
const char* to_string(SequenceStatus s) noexcept;

// The stop conditions the scheduler can see (stop strings are the
// detokenizer's: it calls Scheduler::finish_request).
struct StopConditions {
  std::vector<int32_t> eos_token_ids;   // empty when ignore_eos
  std::vector<int32_t> stop_token_ids;
  int32_t max_tokens = 16;              // generated tokens
  int32_t max_seq_len = 0;              // prompt + generated
};

struct Sequence {
  uint64_t seq_id = 0;                  // the KV allocator's id; never reused
  std::string request_id;
  uint64_t request_key = 0;             // the request's first seq_id, shared by its samples; never reused
  int32_t index = 0;                    // sample index, 0..n-1
  uint64_t arrival_order = 0;           // FCFS rank of its request (smaller = older)
  std::vector<int32_t> tokens;          // prompt, then generated tokens
  int32_t num_prompt_tokens = 0;
  // Leading tokens whose K/V is valid. The last token's K/V is computed by the
  // step that feeds it, so a decoding sequence has num_tokens() - 1 here.
  int32_t num_computed_tokens = 0;
  int32_t num_cached_tokens = 0;        // prompt tokens served by the prefix cache (first admission)
  int32_t num_kv_tokens = 0;            // slots the allocator holds for it
  // StreamingLLM (Scheduler: kv_cache.window): rows evicted after the sinks,
  // so a position p past the sinks sits at cache position p -
  // num_evicted_tokens; and the rows the allocator holds (num_kv_tokens
  // then counts the text the sequence covers).
  int32_t num_evicted_tokens = 0;
  int32_t num_cache_rows = 0;
  uint64_t last_step_id = 0;            // the last step that scheduled it
  // >= 0 while a step planned ahead (Scheduler::schedule_ahead) decodes a
  // token not sampled yet: tokens.back() is pending, to be replaced by the id the
  // step in flight samples on this logits row.
  int32_t pending_row = -1;
  // In a step in flight that its update has not yet come back from
  // (pipelined scheduling, Scheduler: max_steps_in_flight > 1).
  bool in_flight = false;
  // Samples this sequence stands for: n until its prompt is prefilled and it
  // forks into n samples, then 1.
  int32_t num_unforked_samples = 1;
  SequenceStatus status = SequenceStatus::waiting;
  FinishReason finish_reason = FinishReason::none;
  std::string error;
  std::shared_ptr<const SamplingParams> sampling;
  StopConditions stop;

  // Host copy of its K/V while preempted in offload mode: one buffer per
  // allocator block of positions, so a prefix-cache hit on resume can skip
  // whole blocks. num_offloaded_tokens == 0 means nothing is saved.
  std::vector<std::vector<uint8_t>> offloaded_blocks;
  int32_t num_offloaded_tokens = 0;
  // Prefill/decode disaggregation: a prefill's K/V goes under this key when
  // it ends; a handed-off sequence arrives with its first token appended and
  // its prompt's K/V as offloaded blocks, and announces that token (or ends
  // with it, handoff_finish) when admitted.
  std::string kv_export_key;
  bool announce_first_token = false;
  FinishReason handoff_finish = FinishReason::none;

  TimePoint arrival_time{};
  TimePoint first_scheduled_time{};     // epoch until scheduled
  TimePoint first_token_time{};         // epoch until the first token
  TimePoint finish_time{};
  std::vector<TimePoint> token_times;   // one per generated token

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_generated_tokens() const { return num_tokens() - num_prompt_tokens; }
  int32_t last_token() const { return tokens.back(); }
  bool is_finished() const { return status == SequenceStatus::finished; }
  // Tokens still to feed before it can produce its next token.
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  // The next token ends it whatever its value (max_tokens or the context limit).
  bool next_token_ends() const { return reaches_length(num_generated_tokens() + 1, num_tokens() + 1); }
  // The length rule of append_token: `generated` tokens of `total` end it.
  bool reaches_length(int32_t generated, int32_t total) const {
    return generated >= stop.max_tokens || total >= stop.max_seq_len;
  }
  // The most tokens it will ever hold (what the KV allocator is told).
  int32_t max_total_tokens() const;

  // Appends a sampled token with its time; returns the finish reason it
  // causes (none, stop or length) without changing the status.
  FinishReason append_token(int32_t token, TimePoint now);
  bool is_stop_token(int32_t token) const;
  // Arrival-relative timings and usage for its final event.
  Timings timings() const;
  Usage usage() const;
};

// Builds the stop conditions of a request.
StopConditions make_stop_conditions(const SamplingParams& sampling, const std::vector<int32_t>& eos_token_ids,
                                    int32_t max_seq_len);

}  // namespace llmk
