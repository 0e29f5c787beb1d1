#include "ipc/errors.hpp"

namespace llmk::ipc {

ErrorReply error_reply(ErrorCode code, std::string message, std::string param) {
  ErrorReply r;
  r.message = std::move(message);
  r.param = std::move(param);
  switch (code) {
    case ErrorCode::invalid_argument:
      r = {400, "invalid_request_error", "invalid_argument", r.message, r.param};
      break;
    case ErrorCode::unsupported:
      r = {400, "invalid_request_error", "unsupported", r.message, r.param};
      break;
    case ErrorCode::not_found:
      r = {404, "not_found_error", "not_found", r.message, r.param};
      break;
    case ErrorCode::overloaded:
      r = {503, "server_overloaded", "overloaded", r.message, r.param};
      break;
    case ErrorCode::peer_lost:
      r = {503, "server_unavailable", "peer_lost", r.message, r.param};
      break;
    case ErrorCode::cancelled:
      r = {499, "cancelled", "cancelled", r.message, r.param};
      break;
    case ErrorCode::deadline_exceeded:
      r = {504, "timeout_error", "deadline_exceeded", r.message, r.param};
      break;
    case ErrorCode::invalid_config:
    case ErrorCode::bad_checkpoint:
    case ErrorCode::plugin:
    case ErrorCode::internal:
      r = {500, "internal_error", to_string(code), r.message, r.param};
      break;
  }
  return r;
}

ErrorReply error_reply(ProtocolFailure failure, std::string message) {
  switch (failure) {
    case ProtocolFailure::malformed: return {400, "invalid_request_error", "malformed", std::move(message), {}};
    case ProtocolFailure::unsupported_version:
      return {400, "invalid_request_error", "unsupported_version", std::move(message), "v"};
    case ProtocolFailure::unknown_type: return {404, "not_found_error", "unknown_type", std::move(message), {}};
    case ProtocolFailure::payload_too_large:
      return {413, "invalid_request_error", "payload_too_large", std::move(message), {}};
    case ProtocolFailure::method_not_allowed:
      return {405, "invalid_request_error", "method_not_allowed", std::move(message), {}};
    case ProtocolFailure::shutting_down:
      return {503, "server_overloaded", "shutting_down", std::move(message), {}};
    case ProtocolFailure::unauthorized:
      return {401, "invalid_request_error", "invalid_api_key", std::move(message), {}};
    case ProtocolFailure::rate_limited:
      return {429, "rate_limit_exceeded", "rate_limit_exceeded", std::move(message), {}};
  }
  return {500, "internal_error", "internal", std::move(message), {}};
}

ErrorReply error_reply(const std::exception& e) {
  if (const auto* pr = dynamic_cast<const ProtocolError*>(&e)) return error_reply(pr->failure(), pr->what());
  if (const auto* pe = dynamic_cast<const ParamError*>(&e)) return error_reply(pe->code(), pe->what(), pe->field());
  if (const auto* le = dynamic_cast<const Error*>(&e)) return error_reply(le->code(), le->what());
  if (const auto* je = dynamic_cast<const nlohmann::json::exception*>(&e)) {
    return error_reply(ProtocolFailure::malformed, std::string("malformed JSON: ") + je->what());
  }
  return error_reply(ErrorCode::internal, e.what());
}

nlohmann::json to_openai_json(const ErrorReply& r) {
  return {{"error",
           {{"message", r.message},
            {"type", r.type},
            {"param", r.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.param)},
            {"code", r.code}}}};
}

nlohmann::json to_zmq_json(const ErrorReply& r, const nlohmann::json& id) {
  nlohmann::json j = {{"v", 1}, {"type", "error"}, {"id", id}, {"code", r.code}, {"message", r.message}};
  if (!r.param.empty()) j["param"] = r.param;
  return j;
}

}  // namespace llmk::ipc
