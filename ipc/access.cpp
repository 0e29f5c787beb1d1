#include "ipc/access.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace llmk::ipc {

HttpAccess::HttpAccess(Backend& backend, Metrics& metrics, const AuthOptions& options, double default_timeout_s)
    : metrics_(metrics),
      options_(options),
      default_timeout_s_(default_timeout_s),
      limiter_(std::make_shared<KeyLimiter>(options)),
      deadlines_(backend) {
  if (options_.http_keys()) keys_.emplace(options_.keys_file, options_.keys_env);
}

std::optional<ErrorReply> HttpAccess::authenticate(const std::string& path, const std::string& authorization,
                                                   const std::string& x_api_key, std::string& key_name) {
  key_name.clear();
  if (!keys_) return std::nullopt;
  const std::string secret = presented_secret(authorization, x_api_key);
  if (!secret.empty()) {
    if (auto name = keys_->find(secret)) {
      key_name = *name;
      return std::nullopt;
    }
  }
  for (const auto& open : options_.open_routes)
    if (path == open) return std::nullopt;
  metrics_.on_rejected(Frontend::http, "invalid_api_key");
  return error_reply(ProtocolFailure::unauthorized,
                     secret.empty() ? "no API key: send it as 'Authorization: Bearer KEY' (or 'x-api-key: KEY')"
                                    : "the API key is not valid (unknown or revoked)");
}

std::variant<HttpAccess::Ticket, ErrorReply> HttpAccess::admit(const std::string& key_name, const std::string& body) {
  Ticket ticket{key_name, default_timeout_s_};
  try {
    if (const auto timeout = request_timeout_field(body)) ticket.timeout_s = *timeout;
  } catch (const std::exception& e) {
    return error_reply(e);
  }
  if (key_name.empty()) return ticket;
  if (auto refusal = limiter_->try_acquire(key_name, LimitClock::now())) {
    metrics_.on_rejected(Frontend::http, "rate_limit_exceeded", key_name, refusal->reason);
    ErrorReply reply = error_reply(ProtocolFailure::rate_limited, refusal->message);
    reply.retry_after_s = refusal->retry_after_s;
    return reply;
  }
  return ticket;
}

void HttpAccess::release(const Ticket& ticket) {
  if (!ticket.key_name.empty()) limiter_->release(ticket.key_name);
}

Backend::EventCallback HttpAccess::watch(const Ticket& ticket, const std::string& request_id,
                                         Backend::EventCallback on_event) {
  on_event = deadlines_.watch(request_id, ticket.timeout_s, std::move(on_event));
  if (ticket.key_name.empty()) return on_event;
  return [limiter = limiter_, key = ticket.key_name, on_event = std::move(on_event)](const RequestEvent& ev) {
    if (ev.finished) {
      const uint64_t prompt = ev.request_done ? static_cast<uint64_t>(std::max(0, ev.usage.prompt_tokens)) : 0;
      limiter->add_tokens(key, prompt + static_cast<uint64_t>(std::max(0, ev.usage.completion_tokens)),
                          LimitClock::now());
    }
    if (ev.request_done) limiter->release(key);
    on_event(ev);
  };
}

std::optional<double> request_timeout_field(const std::string& body) {
  if (body.find("\"timeout\"") == std::string::npos) return std::nullopt;  // skips a second parse
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("timeout") || j["timeout"].is_null()) return std::nullopt;
  const auto& t = j["timeout"];
  if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() <= 0)
    throw ParamError("timeout", "timeout must be a positive number of seconds, got " + t.dump());
  return t.get<double>();
}

}  // namespace llmk::ipc
