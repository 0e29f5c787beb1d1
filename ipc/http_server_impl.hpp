// The inside of HttpServer, shared by its two sources: http_server.cpp (the
// routes, plain and SSE answers) and http_stream_modes.cpp (WebSocket and
// polling). Not part of the ipc interface.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/access.hpp"
#include "ipc/errors.hpp"
#include "ipc/http_poll.hpp"
#include "ipc/http_server.hpp"
#include "ipc/http_transport.hpp"
#include "ipc/mailbox.hpp"

namespace llmk::ipc {

// One request's events, filled by the backend, drained by its handler; its
// fd is readable while events wait (HttpExchange::wait watches it).
using Pending = Mailbox<RequestEvent>;

// The ids of requests the backend still holds; shared with callbacks,
// which may run after the server is gone.
struct LiveSet {
  std::mutex mutex;
  std::set<std::string> ids;
  size_t size() {
    std::lock_guard lock(mutex);
    return ids.size();
  }
};

enum class GenerationRoute { completions, chat, generate };

// How one route shapes a request's events (OpenAiResponse or SglangResponse
// behind one face).
struct Shaper {
  std::function<std::vector<nlohmann::json>(const RequestEvent&)> chunks;  // streaming
  std::function<nlohmann::json()> usage_chunk;                             // streaming, include_usage
  std::function<void(const RequestEvent&)> add;                            // non-streaming
  std::function<nlohmann::json()> response;                                // non-streaming
};

struct Generation {
  std::string id;
  Request request;
  bool stream = false;
  bool include_usage = false;
  Shaper shaper;
};

// What one batch of events adds to a stream: the JSON text of each data
// payload ([DONE] not included), whether the stream ended, and whether the
// request must still be cancelled (an error before its last event).
struct StreamStep {
  std::vector<std::string> payloads;
  bool done = false;
  bool cancel = false;
};

struct HttpServer::Impl {
  Backend& backend;
  Metrics& metrics;
  HttpServerOptions options;
  std::atomic<bool> draining{false};
  std::shared_ptr<LiveSet> live = std::make_shared<LiveSet>();
  std::atomic<uint64_t> next_id{0};
  HttpAccess access;
  std::shared_ptr<PollStore> polls;
  std::unique_ptr<HttpTransport> transport;

  Impl(Backend& b, Metrics& m, HttpServerOptions o)
      : backend(b), metrics(m), options(std::move(o)), access(b, m, options.auth, options.request_timeout_s),
        polls(std::make_shared<PollStore>(options.poll)) {}

  // http_server.cpp
  void handle(HttpExchange& ex);
  void reject(HttpExchange& ex, const ErrorReply& error);
  bool authorized(HttpExchange& ex, std::string& key_name);
  std::optional<HttpAccess::Ticket> admit(HttpExchange& ex, const std::string& key_name, const std::string& body);
  Generation parse_generation(GenerationRoute route, const std::string& body);
  std::shared_ptr<Pending> submit(Request request, const HttpAccess::Ticket& ticket = {});
  void submit_to(Request request, const HttpAccess::Ticket& ticket, Backend::EventCallback on_event);
  StreamStep stream_step(const std::vector<RequestEvent>& events, Generation& generation);
  void handle_generation(GenerationRoute route, HttpExchange& ex, const std::string& key_name);
  void handle_embeddings(HttpExchange& ex, const std::string& key_name);
  void serve_plain(Generation& generation, Pending& pending, HttpExchange& ex);
  void serve_sse(Generation& generation, Pending& pending, HttpExchange& ex);
  void handle_health_generate(HttpExchange& ex);
  bool route_info(HttpExchange& ex);

  // http_stream_modes.cpp
  void handle_websocket(GenerationRoute route, HttpExchange& ex, const std::string& key_name);
  void handle_poll_submit(GenerationRoute route, HttpExchange& ex, const std::string& key_name);
  void handle_poll_fetch(const std::string& id, HttpExchange& ex, const std::string& key_name);
  void handle_poll_delete(const std::string& id, HttpExchange& ex, const std::string& key_name);
  void expire_polls();
};

void write_error(HttpExchange& ex, const ErrorReply& error);
void write_json(HttpExchange& ex, int status, const nlohmann::json& body);

}  // namespace llmk::ipc
