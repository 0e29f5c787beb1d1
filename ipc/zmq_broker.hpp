// A ZeroMQ broker in front of many `llmk serve` replicas: libzmq's built-in
// proxy between a ROUTER that clients connect to (the endpoint they would
// give one server) and a DEALER that replicas connect to as workers
// (server.zmq_broker). Requests go to the replicas in turn; each reply
// finds its client by the envelope the ROUTER added. ZMTP heartbeats on
// both sockets drop a silent peer (a replica that hangs or a client that
// vanished) within heartbeat_timeout_ms, so requests stop going to it.
#pragma once

#include <memory>
#include <string>
#include <thread>

namespace llmk::ipc {

struct ZmqBrokerOptions {
  std::string clients = "tcp://127.0.0.1:5555";  // ROUTER: where clients connect
  std::string workers = "tcp://127.0.0.1:5556";  // DEALER: where replicas connect (server.zmq_broker)
  int heartbeat_interval_ms = 1000;
  int heartbeat_timeout_ms = 5000;
};

class ZmqBroker {
 public:
  // Binds both sockets at once (throws Error(invalid_config) naming the one
  // that fails), then proxies on a thread of its own.
  explicit ZmqBroker(ZmqBrokerOptions options);
  ~ZmqBroker();  // stop()
  ZmqBroker(const ZmqBroker&) = delete;
  ZmqBroker& operator=(const ZmqBroker&) = delete;

  std::string clients_endpoint() const { return clients_endpoint_; }  // as bound (resolved port)
  std::string workers_endpoint() const { return workers_endpoint_; }
  void stop();  // ends the proxy; messages in flight are dropped

 private:
  struct Sockets;
  std::unique_ptr<Sockets> sockets_;
  std::string clients_endpoint_;
  std::string workers_endpoint_;
  std::thread thread_;
};

}  // namespace llmk::ipc
