// The one place where errors become client replies: llmk::ErrorCode (and the
// front ends' own protocol failures) to an HTTP status with an OpenAI-shaped
// body, or to a ZeroMQ error message. Both front ends call only this.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace llmk::ipc {

// Failures that exist only at the protocol layer, besides llmk::ErrorCode.
enum class ProtocolFailure {
  malformed,           // not JSON, not an object, bad multipart frames
  unsupported_version, // "v" is not one this server speaks
  unknown_type,        // unknown message type / route
  payload_too_large,   // body above server.max_body_bytes
  method_not_allowed,
  shutting_down,       // the server is draining
  unauthorized,        // no API key, or one the server does not hold (HTTP 401)
  rate_limited,        // a per-key limit (server.auth.limits) refuses the request (HTTP 429)
};

class ProtocolError : public std::runtime_error {
 public:
  ProtocolError(ProtocolFailure failure, const std::string& message)
      : std::runtime_error(message), failure_(failure) {}
  ProtocolFailure failure() const noexcept { return failure_; }

 private:
  ProtocolFailure failure_;
};

// A request field has the wrong type or value; `field()` names it (the
// OpenAI error's "param"). The core's FieldError, which the engine's own
// validation throws too.
using ParamError = FieldError;

struct ErrorReply {
  int http_status = 500;
  std::string type;     // OpenAI "type": invalid_request_error, not_found_error, ...
  std::string code;     // stable machine-readable code, also the ZeroMQ "code"
  std::string message;
  std::string param;    // the offending field, "" when none
  int retry_after_s = 0; // > 0: HTTP Retry-After (a 503 without it says 1)
};

ErrorReply error_reply(ErrorCode code, std::string message, std::string param = {});
ErrorReply error_reply(ProtocolFailure failure, std::string message);
// Any exception: ProtocolError, ParamError, llmk::Error, nlohmann::json errors (400), others (500).
ErrorReply error_reply(const std::exception& e);

// {"error": {"message", "type", "param", "code"}} (param null when empty).
nlohmann::json to_openai_json(const ErrorReply& reply);
// {"v": 1, "type": "error", "id": ..., "code", "message", "param"?} (id null when unknown).
nlohmann::json to_zmq_json(const ErrorReply& reply, const nlohmann::json& id);

}  // namespace llmk::ipc
