// A ZeroMQ broker in front of many `llmk serve` replicas (`llmk broker`):
// clients connect to one ROUTER as they would to one server; replicas
// connect their DEALER (server.zmq_broker, ipc/broker_link.hpp) to a second
// ROUTER and register. The broker reads what it routes:
//   - a submit goes to the registered replica with the fewest requests in
//     flight (ties in turn); with none registered it waits up to
//     queue_timeout_ms, then gets an `overloaded` error;
//   - a cancel goes to the replica serving that request, a bye to every
//     replica serving that client; ping and health are answered here, stats
//     by one replica;
//   - a replica that closes its connection, or is silent past the heartbeat
//     timeout, is dropped, and each request it was serving ends with a
//     `peer_lost` error naming it;
//   - a client the broker cannot reach any more (a send fails under
//     ZMQ_ROUTER_MANDATORY; the replicas' keepalives and the broker's own make
//     sure something is sent) gets its requests cancelled on their replicas.
// docs/protocol.md ("Many replicas behind a broker") is the reference.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace llmk::ipc {

struct ZmqBrokerOptions {
  std::string clients = "tcp://127.0.0.1:5555";  // ROUTER: where clients connect
  std::string workers = "tcp://127.0.0.1:5556";  // ROUTER: where replicas connect (server.zmq_broker)
  // Heartbeats both ways with each replica (the replicas adopt these when
  // they register), plus ZMTP heartbeats on both sockets.
  int heartbeat_interval_ms = 1000;
  int heartbeat_timeout_ms = 5000;
  int queue_timeout_ms = 10000;  // how long a message waits for a replica to be registered
  // A client with requests hears from the broker at least this often (a
  // keepalive when there is nothing else), so a vanished client is noticed.
  std::chrono::milliseconds keepalive_interval{500};
};

class ZmqBroker {
 public:
  // Binds both sockets at once (throws Error(invalid_config) naming the one
  // that fails), then routes on a thread of its own.
  explicit ZmqBroker(ZmqBrokerOptions options);
  ~ZmqBroker();  // stop()
  ZmqBroker(const ZmqBroker&) = delete;
  ZmqBroker& operator=(const ZmqBroker&) = delete;

  std::string clients_endpoint() const { return clients_endpoint_; }  // as bound (resolved port)
  std::string workers_endpoint() const { return workers_endpoint_; }
  size_t num_replicas() const { return num_replicas_.load(); }
  // Ends routing: each request in flight gets a `shutting_down` error and
  // its replica the client's bye.
  void stop();

 private:
  struct Core;
  std::unique_ptr<Core> core_;
  std::string clients_endpoint_;
  std::string workers_endpoint_;
  std::atomic<size_t> num_replicas_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace llmk::ipc
