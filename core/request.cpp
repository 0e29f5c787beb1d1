#include "core/request.hpp"

#include <cmath>
#include <sstream>

namespace llmk {

const char* to_string(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

const char* to_string(EarlyStopping e) noexcept {
  switch (e) {
    case EarlyStopping::heuristic: return "false";
    case EarlyStopping::immediate: return "true";
    case EarlyStopping::never: return "never";
  }
  return "unknown";
}

namespace {

// Shortest text that reads back as the same float ("0.01", not "0.010000").
std::string number_text(double v) {
  std::ostringstream out;
  out.precision(9);
  out << v;
  return out.str();
}

void require(bool ok, const char* field, const std::string& rule, double got) {
  if (!ok) throw FieldError(field, std::string("'") + field + "' must be " + rule + ", got " + number_text(got));
}

std::string closed(double lo, double hi) { return "in [" + number_text(lo) + ", " + number_text(hi) + "]"; }

}  // namespace

void validate_sampling_params(const SamplingParams& p) {
  using namespace sampling_limits;
  require(std::isfinite(p.temperature) && p.temperature >= 0.0f && p.temperature <= max_temperature, "temperature",
          closed(0, max_temperature), p.temperature);
  require(p.top_k >= -1, "top_k", ">= 0 (0 or -1: off)", p.top_k);
  require(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "in (0, 1]", p.top_p);
  require(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p", closed(0, 1), p.min_p);
  require(p.repetition_penalty >= min_repetition_penalty && p.repetition_penalty <= max_repetition_penalty,
          "repetition_penalty", closed(min_repetition_penalty, max_repetition_penalty), p.repetition_penalty);
  require(p.presence_penalty >= -max_abs_penalty && p.presence_penalty <= max_abs_penalty, "presence_penalty",
          closed(-max_abs_penalty, max_abs_penalty), p.presence_penalty);
  require(p.frequency_penalty >= -max_abs_penalty && p.frequency_penalty <= max_abs_penalty, "frequency_penalty",
          closed(-max_abs_penalty, max_abs_penalty), p.frequency_penalty);
  require(p.logprobs >= -1 && p.logprobs <= max_logprobs, "logprobs", closed(-1, max_logprobs), p.logprobs);
  require(p.n >= 1 && p.n <= max_samples, "n", closed(1, max_samples), p.n);
  require(p.max_tokens >= 1, "max_tokens", ">= 1", p.max_tokens);
  require(p.num_speculative_tokens >= -1 && p.num_speculative_tokens <= max_speculative_tokens,
          "num_speculative_tokens", closed(-1, max_speculative_tokens) + " (-1: the engine's, 0: off)",
          p.num_speculative_tokens);
  if (p.stop.size() > max_stop_strings)
    throw FieldError("stop", "'stop' may hold at most " + std::to_string(max_stop_strings) + " strings, got " +
                                 std::to_string(p.stop.size()));
  for (const auto& stop : p.stop)
    if (stop.empty()) throw FieldError("stop", "'stop' strings must not be empty");
  require(p.beam_width >= 0 && p.beam_width <= max_beam_width, "beam_width", closed(0, max_beam_width) + " (0: off)",
          p.beam_width);
  if (p.beam_width > 0) validate_beam_search(p);
}

// Beam search scores the model's raw log-probabilities and draws nothing:
// every parameter that would change a row's distribution, or that needs a
// token at a time, is refused by name.
void validate_beam_search(const SamplingParams& p) {
  using namespace sampling_limits;
  const std::string width = std::to_string(p.beam_width);
  auto refuse = [](const char* field, const std::string& why) {
    throw FieldError(field, std::string("'") + field + "' " + why);
  };
  if (p.n > p.beam_width) refuse("n", "must not exceed the beam width (" + width + "), got " + std::to_string(p.n));
  if (p.temperature != 0.0f && p.temperature != 1.0f)
    refuse("temperature", "must be 0 or 1 with beam search (it scores the model's raw log-probabilities), got " +
                              number_text(p.temperature));
  if (p.top_k > 0) refuse("top_k", "is not supported with beam search (leave it at 0 or -1)");
  if (p.top_p != 1.0f) refuse("top_p", "is not supported with beam search (leave it at 1)");
  if (p.min_p != 0.0f) refuse("min_p", "is not supported with beam search (leave it at 0)");
  if (p.repetition_penalty != 1.0f) refuse("repetition_penalty", "is not supported with beam search (leave it at 1)");
  if (p.presence_penalty != 0.0f) refuse("presence_penalty", "is not supported with beam search (leave it at 0)");
  if (p.frequency_penalty != 0.0f) refuse("frequency_penalty", "is not supported with beam search (leave it at 0)");
  if (p.logprobs >= 0) refuse("logprobs", "is not supported with beam search");
  if (!p.stop.empty()) refuse("stop", "strings are not supported with beam search (stop_token_ids are)");
  if (p.num_speculative_tokens > 0) refuse("num_speculative_tokens", "must be 0 or -1 with beam search (no drafts)");
  require(std::isfinite(p.length_penalty) && std::fabs(p.length_penalty) <= max_abs_length_penalty, "length_penalty",
          closed(-max_abs_length_penalty, max_abs_length_penalty), p.length_penalty);
}

}  // namespace llmk
