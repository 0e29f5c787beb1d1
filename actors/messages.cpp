// Errors that cross actors, request validation and error events.
#include <cmath>

#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/sampler.hpp"

namespace llmk {

namespace {
const caf::atom_value error_category = caf::atom("llmk");
}

// CAF treats an error code of 0 as "no error", and ErrorCode's first value is
// 0: codes travel shifted by one.
caf::error make_actor_error(int code, std::string message) {
  return caf::error(static_cast<uint8_t>(code + 1), error_category, caf::make_message(std::move(message)));
}

ErrorCode error_code_of(const caf::error& err) {
  if (!err) return ErrorCode::internal;
  if (err.category() == error_category && err.code() >= 1 &&
      err.code() <= static_cast<uint8_t>(ErrorCode::internal) + 1)
    return static_cast<ErrorCode>(err.code() - 1);
  return ErrorCode::internal;
}

std::string describe(const caf::error& err) {
  if (!err) return "an actor failed without saying why";
  if (err.category() == error_category && err.context().match_elements<std::string>())
    return err.context().get_as<std::string>(0);
  if (err.category() == caf::atom("system") && err.code() == static_cast<uint8_t>(caf::sec::request_timeout))
    return "an actor did not answer in time (request timeout)";
  return caf::to_string(err);
}

std::string validate_request(const Request& request) {
  const SamplingParams& s = request.sampling;
  if (request.prompt.empty() && request.prompt_token_ids.empty()) return "the prompt is empty";
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    return "temperature must be >= 0 (0 is greedy), got " + std::to_string(s.temperature);
  if (s.top_k < 0) return "top_k must be >= 0 (0 is off), got " + std::to_string(s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1)) return "top_p must be in (0, 1], got " + std::to_string(s.top_p);
  if (!(s.min_p >= 0 && s.min_p <= 1)) return "min_p must be in [0, 1], got " + std::to_string(s.min_p);
  if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0)
    return "repetition_penalty must be > 0 (1 is off), got " + std::to_string(s.repetition_penalty);
  if (!std::isfinite(s.presence_penalty) || !std::isfinite(s.frequency_penalty))
    return "presence_penalty and frequency_penalty must be finite";
  if (s.logprobs < -1 || s.logprobs > kMaxLogprobs)
    return "logprobs must be in [-1, " + std::to_string(kMaxLogprobs) + "], got " + std::to_string(s.logprobs);
  if (s.n < 1) return "n must be >= 1, got " + std::to_string(s.n);
  if (s.max_tokens < 1) return "max_tokens must be >= 1, got " + std::to_string(s.max_tokens);
  for (const auto& stop : s.stop)
    if (stop.empty()) return "stop strings must not be empty";
  try {
    validate_sampling_params(s);  // the sampler's own limits
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

RequestEvent make_error_event(const std::string& request_id, const std::string& message, ErrorCode code) {
  RequestEvent event;
  event.error_code = code;
  event.request_id = request_id;
  event.finished = true;
  event.finish_reason = FinishReason::error;
  event.error = message;
  event.request_done = true;
  return event;
}

}  // namespace llmk
