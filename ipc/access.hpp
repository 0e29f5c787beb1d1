// What the HTTP server checks before it serves a request, and how it watches
// one once submitted: the API key (401 without a valid one, except on the
// open routes), the key's limits (429 with Retry-After), and the deadline
// (the body's "timeout" in seconds, else server.request_timeout_s), after
// which the request is cancelled and answered 504 deadline_exceeded.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "ipc/auth.hpp"
#include "ipc/backend.hpp"
#include "ipc/errors.hpp"
#include "ipc/limits.hpp"
#include "ipc/metrics.hpp"

namespace llmk::ipc {

class HttpAccess {
 public:
  // Reads the keys at once: throws Error(invalid_config) like KeyStore.
  HttpAccess(Backend& backend, Metrics& metrics, const AuthOptions& options, double default_timeout_s);

  // nullopt: `path` may be served; the key's name (or "" with no keys
  // configured) goes to key_name. Otherwise the 401 reply, counted.
  std::optional<ErrorReply> authenticate(const std::string& path, const std::string& authorization,
                                         const std::string& x_api_key, std::string& key_name);

  struct Ticket {
    std::string key_name;  // "" without keys: no per-key limits
    double timeout_s = 0;  // 0: no deadline
  };
  // A request about to be submitted: the key's limits (a 429, counted by
  // key) and its deadline (a 400 naming "timeout" when it is not a
  // positive number). Holds one of the key's concurrency slots until the
  // callback from watch() sees request_done (or release() is called).
  std::variant<Ticket, ErrorReply> admit(const std::string& key_name, const std::string& body);
  void release(const Ticket& ticket);
  // Wraps a submitted request's callback: counts its tokens for the key,
  // frees its slot when it is done, and arms its deadline.
  Backend::EventCallback watch(const Ticket& ticket, const std::string& request_id, Backend::EventCallback on_event);

 private:
  Metrics& metrics_;
  const AuthOptions options_;
  const double default_timeout_s_;
  std::optional<KeyStore> keys_;
  std::shared_ptr<KeyLimiter> limiter_;
  Deadlines deadlines_;
};

// The body's "timeout" (seconds) when it has one; nullopt when absent or
// null. Throws ParamError("timeout") when it is not a positive number.
std::optional<double> request_timeout_field(const std::string& body);

}  // namespace llmk::ipc
