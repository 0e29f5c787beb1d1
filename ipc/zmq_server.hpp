// The ZeroMQ front end: one ROUTER socket, owned by one thread, serving the
// protocol of docs/protocol.md. Backend callbacks only post events to a
// mailbox; the socket thread turns them into messages. A peer that
// disappears (send fails under ZMQ_ROUTER_MANDATORY, ZMTP heartbeat
// timeout, or an explicit "bye") gets its requests cancelled.
//
// As a broker's worker (options.broker, `llmk broker`), the socket is a
// DEALER that connects to the broker and registers (ipc/broker_link.hpp),
// and a peer is the client behind the broker: messages arrive as [client]
// [payload] and replies go back the same way. The broker routes a client's
// cancel and bye to the replica serving its requests, and says bye for a
// client that vanished.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ipc/backend.hpp"
#include "ipc/metrics.hpp"

namespace llmk::ipc {

struct ZmqServerOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";
  size_t max_message_bytes = 1 << 20;  // server.max_body_bytes
  // A peer with live requests hears from the server at least this often
  // (a keepalive when there is nothing else): a vanished peer is noticed
  // within about this long.
  std::chrono::milliseconds keepalive_interval{500};
  int heartbeat_interval_ms = 1000;  // ZMTP heartbeats: silent dead peers (and a broker's until it sets its own)
  int heartbeat_timeout_ms = 5000;
  std::string broker = "";  // non-empty: connect here as a broker's worker; endpoint is not bound
  std::string replica_name = "";  // how the broker names this replica (its logs, health)
  // CURVE (ipc/zmq_curve.hpp): the server's Z85 secret key ("" = plain
  // ZeroMQ) and the file of client public keys its ZAP handler admits.
  // Not with a broker (the broker's own socket faces the clients).
  std::string curve_secret_key = "";
  std::string curve_allowed_keys_file = "";
  double request_timeout_s = 0;  // server.request_timeout_s: each request's deadline; 0 = none
};

class ZmqServer {
 public:
  // Binds (or connects to the broker) at once: throws Error(invalid_config)
  // naming the endpoint when it cannot (address in use, bad endpoint).
  ZmqServer(Backend& backend, Metrics& metrics, ZmqServerOptions options);
  ~ZmqServer();  // stop()
  ZmqServer(const ZmqServer&) = delete;
  ZmqServer& operator=(const ZmqServer&) = delete;

  std::string endpoint() const { return endpoint_; }  // as bound (resolved port), or the broker's
  // New submits are refused (code shutting_down); live requests go on.
  void start_draining();
  size_t num_live() const { return num_live_.load(); }
  // Cancels every live request; their final events still go out.
  void cancel_all();
  // Cancels what is live, waits briefly for it to end, closes the socket.
  void stop();

 private:
  struct State;
  class EmbedWorker;
  void run();

  Backend& backend_;
  Metrics& metrics_;
  const ZmqServerOptions options_;
  std::string endpoint_;
  std::unique_ptr<State> state_;
  std::atomic<size_t> num_live_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> cancel_all_{false};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace llmk::ipc
