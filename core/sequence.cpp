#include "core/sequence.hpp"

#include <algorithm>

namespace llmk {

const char* to_string(SequenceStatus s) noexcept {
  switch (s) {
    case SequenceStatus::waiting: return "waiting";
    case SequenceStatus::running: return "running";
    case SequenceStatus::preempted: return "preempted";
    case SequenceStatus::finished: return "finished";
  }
  return "unknown";
}

int32_t Sequence::max_total_tokens() const {
  const int64_t want = static_cast<int64_t>(num_prompt_tokens) + stop.max_tokens;
  return static_cast<int32_t>(std::min<int64_t>(want, stop.max_seq_len));
}

bool Sequence::is_stop_token(int32_t token) const {
  auto contains = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return contains(stop.stop_token_ids) || contains(stop.eos_token_ids);
}

FinishReason Sequence::append_token(int32_t token, TimePoint now) {
  tokens.push_back(token);
  token_times.push_back(now);
  if (num_generated_tokens() == 1) first_token_time = now;
  if (is_stop_token(token)) return FinishReason::stop;
  if (reaches_length(num_generated_tokens(), num_tokens())) return FinishReason::length;
  return FinishReason::none;
}

Timings Sequence::timings() const {
  auto seconds = [this](TimePoint t) {
    return t == TimePoint{} ? 0.0 : std::chrono::duration<double>(t - arrival_time).count();
  };
  Timings t;
  t.queue_s = seconds(first_scheduled_time);
  t.time_to_first_token_s = seconds(first_token_time);
  t.e2e_s = seconds(finish_time);
  t.token_times_s.reserve(token_times.size());
  for (TimePoint p : token_times) t.token_times_s.push_back(seconds(p));
  return t;
}

Usage Sequence::usage() const {
  Usage u;
  u.prompt_tokens = num_prompt_tokens;
  u.completion_tokens = num_generated_tokens();
  u.cached_prompt_tokens = num_cached_tokens;
  return u;
}

StopConditions make_stop_conditions(const SamplingParams& sampling, const std::vector<int32_t>& eos_token_ids,
                                    int32_t max_seq_len) {
  StopConditions s;
  if (!sampling.ignore_eos) s.eos_token_ids = eos_token_ids;
  s.stop_token_ids = sampling.stop_token_ids;
  s.max_tokens = sampling.max_tokens;
  s.max_seq_len = max_seq_len;
  return s;
}

}  // namespace llmk
