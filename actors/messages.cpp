// Errors that cross actors, and error events.
#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "core/error.hpp"

namespace llmk {

namespace {
const caf::atom_value error_category = caf::atom("llmk");
}

// CAF treats an error code of 0 as "no error", and ErrorCode's first value is
// 0: codes travel shifted by one.
caf::error make_actor_error(int code, std::string message, std::string field) {
  return caf::error(static_cast<uint8_t>(code + 1), error_category,
                    caf::make_message(std::move(message), std::move(field)));
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
  if (err.category() == error_category && err.context().match_elements<std::string, std::string>())
    return err.context().get_as<std::string>(0);
  if (err.category() == caf::atom("system") && err.code() == static_cast<uint8_t>(caf::sec::request_timeout))
    return "an actor did not answer in time (request timeout)";
  return caf::to_string(err);
}

std::string field_of(const caf::error& err) {
  if (err && err.category() == error_category && err.context().match_elements<std::string, std::string>())
    return err.context().get_as<std::string>(1);
  return {};
}

RequestEvent make_error_event(const std::string& request_id, const std::string& message, ErrorCode code,
                              std::string field) {
  RequestEvent event;
  event.error_code = code;
  event.error_field = std::move(field);
  event.request_id = request_id;
  event.finished = true;
  event.finish_reason = FinishReason::error;
  event.error = message;
  event.request_done = true;
  return event;
}

}  // namespace llmk
