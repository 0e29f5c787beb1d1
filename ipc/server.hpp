// The front ends of `llmk serve` together: the ZeroMQ server and the HTTP
// gateway over one backend, with shared metrics and a graceful drain.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ipc/backend.hpp"
#include "ipc/http_server.hpp"
#include "ipc/metrics.hpp"
#include "ipc/zmq_server.hpp"

namespace llmk::ipc {

struct ServerOptions {
  std::string http = "127.0.0.1:8000";       // "" = no HTTP
  std::string zmq = "tcp://127.0.0.1:5555";  // "" = no ZeroMQ
  size_t max_body_bytes = 1 << 20;
  double drain_timeout_s = 30.0;
  std::string replica_name = "";  // the metrics' replica label; "" = the HTTP HOST:PORT (else the ZeroMQ endpoint)
  int http_threads = 64;
  std::string zmq_broker = "";  // non-empty: ZeroMQ as this broker's worker instead of binding zmq
  AuthOptions auth{};             // server.auth: HTTP keys and limits, ZeroMQ CURVE
  double request_timeout_s = 0;   // server.request_timeout_s
  TlsFiles tls{};                 // server.tls: HTTPS when both files are set
  // server.io_timeout_s: a stalled HTTP connection is closed after this long.
  std::chrono::milliseconds http_io_timeout{30000};
  PollLimits poll{};  // server.poll_keep_s, poll_max_finished, poll_max_wait_s
};

class Server {
 public:
  // Binds both; throws Error(invalid_config) naming the address that failed.
  Server(Backend& backend, ServerOptions options);
  ~Server();

  HttpServer* http() { return http_.get(); }
  ZmqServer* zmq() { return zmq_.get(); }
  Metrics& metrics() { return metrics_; }
  size_t num_live() const;

  // Stops accepting requests, lets live ones finish for up to
  // drain_timeout_s, cancels the rest, then closes both front ends.
  // Returns how many requests had to be cancelled.
  size_t drain_and_stop();

 private:
  Backend& backend_;
  const ServerOptions options_;
  Metrics metrics_;
  std::unique_ptr<ZmqServer> zmq_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace llmk::ipc
