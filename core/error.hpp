// Errors raised by llmk's core. One exception type with a category, so the
// one place that talks to clients (ipc/) can map it to a status code.
#pragma once

#include <stdexcept>
#include <string>

namespace llmk {

enum class ErrorCode {
  invalid_argument,  // a request or call broke a contract (HTTP 400)
  invalid_config,    // a config key has a bad value (names the key)
  bad_checkpoint,    // a model file is malformed (names the file and tensor)
  unsupported,       // a feature not implemented: refused, never silently wrong
  plugin,            // a plugin failed to load or refused the configuration
  not_found,         // unknown model, request id, file
  overloaded,        // queue full (HTTP 429/503)
  cancelled,
  peer_lost,         // a peer died or stopped answering: a rank of a parallel job (the job ends), a prefill replica (HTTP 503)
  internal,
  deadline_exceeded, // the request's deadline passed and it was cancelled (HTTP 504)
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// An error in one field of a request (a sampling parameter, a prompt):
// `field` names it as clients spell it ("temperature", "stop"), so front ends
// can point at it (OpenAI's "param").
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message, ErrorCode code = ErrorCode::invalid_argument)
      : Error(code, message), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

}  // namespace llmk
