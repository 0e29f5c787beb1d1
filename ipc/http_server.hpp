// The OpenAI-compatible HTTP front end (on ipc/http_transport.hpp, Boost.Beast,
// optionally TLS): POST /v1/completions, POST /v1/chat/completions (stream:
// true as server-sent events), GET /v1/models, /health and /metrics; and what
// the SGLang and vLLM routers call on a worker (docs/replicas.md): POST
// /generate, GET /health_generate, /get_server_info, /get_model_info,
// /get_load and /flush_cache. The three generation routes also stream over a
// WebSocket (an upgrade GET on the same path) and by polling (POST
// /v1/poll/<route>, then GET /v1/poll/{id}); docs/protocol.md. Handler threads
// only parse, submit and wait for their request's events; a client that
// disconnects, streaming or not, gets its request cancelled. With API keys
// configured, every route but server.auth.open_routes needs one
// (ipc/access.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ipc/auth.hpp"
#include "ipc/backend.hpp"
#include "ipc/http_poll.hpp"
#include "ipc/metrics.hpp"

namespace llmk::ipc {

struct HttpServerOptions {
  std::string address = "127.0.0.1:8000";  // HOST:PORT; port 0 picks a free one
  size_t max_body_bytes = 1 << 20;
  int num_threads = 64;  // concurrent connections served (each stream holds one)
  // A request must arrive whole, and each write to a client complete, within
  // this long, or the connection is closed (a stalled client frees its thread).
  std::chrono::milliseconds io_timeout{30000};
  // An idle stream gets an SSE comment this often: keeps proxies open and
  // finds disconnected clients while a request waits in the queue.
  std::chrono::milliseconds keepalive_interval{1000};
  // A streaming request waits this long for its first event before sending
  // the 200 headers, so early refusals get their proper status code.
  std::chrono::milliseconds first_event_wait{2000};
  // GET /health_generate answers 503 when its one-token probe takes longer.
  std::chrono::milliseconds health_generate_timeout{20000};
  AuthOptions auth{};            // API keys and per-key limits (server.auth; ipc/access.hpp)
  double request_timeout_s = 0;  // a request's deadline when its body has no "timeout"; 0 = none
  std::string tls_cert_file{};   // server.tls.cert_file and key_file (PEM): both set serves HTTPS only
  std::string tls_key_file{};
  PollLimits poll{};             // how long and how many polled results are kept
};

class HttpServer {
 public:
  // Binds at once: throws Error(invalid_config) naming the address when it
  // cannot listen there.
  HttpServer(Backend& backend, Metrics& metrics, HttpServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  std::string host() const { return host_; }
  void start_draining();  // new requests get 503 (code shutting_down)
  size_t num_live() const;
  void cancel_all();
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
  bool stopped_ = false;
};

// server.tls, {"cert_file": PEM, "key_file": PEM} or {}: throws
// Error(invalid_config) naming the key for an unknown key, one file without
// the other, or a file that cannot be read.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
};
TlsFiles parse_tls_options(const std::string& json_text);

// "HOST:PORT" -> (host, port); throws Error(invalid_config) naming `key`.
std::pair<std::string, int> split_host_port(const std::string& address, const std::string& key);

}  // namespace llmk::ipc
