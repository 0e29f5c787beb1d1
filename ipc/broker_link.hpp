// A replica's connection to `llmk broker` (server.zmq_broker): one DEALER
// socket that connects to the broker's workers endpoint, registers, and
// heartbeats both ways (docs/protocol.md, "Many replicas behind a broker").
// Client messages arrive on it as [client][payload] (or [client][""][payload])
// and replies go back the same way; control messages between the replica
// and the broker have an empty first frame instead of a client's identity.
// A broker silent past its heartbeat timeout is presumed gone: the link
// closes the socket, connects a new one and registers again, so a replica
// finds a restarted broker by itself. So it does when the broker answers a
// heartbeat with register_again (it dropped this replica, say after a stall). Owned by the ZmqServer's socket thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <zmq.hpp>

namespace llmk::ipc {

class BrokerLink {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects and registers as `name`; throws Error(invalid_config) naming
  // the endpoint when it cannot connect. The heartbeat settings hold until
  // the broker's acknowledgement brings its own.
  BrokerLink(zmq::context_t& context, std::string endpoint, std::string name, int heartbeat_interval_ms,
             int heartbeat_timeout_ms);
  ~BrokerLink();  // close()
  BrokerLink(const BrokerLink&) = delete;
  BrokerLink& operator=(const BrokerLink&) = delete;

  zmq::socket_t& socket() { return *socket_; }
  // Any message from the broker proves it alive; a control message's payload
  // (the frame after the empty one) is read here.
  void on_heard() { last_heard_ = Clock::now(); }
  void on_control(std::string_view payload);
  // Sends heartbeats (at once when `draining` changed) and watches the
  // broker's silence. Returns true when the link was reset: a new socket
  // (poll its handle from now on) that knows none of the old clients, whose
  // requests the caller must cancel.
  bool tick(bool draining);
  bool registered() const { return registered_; }
  // How often tick() wants to run.
  std::chrono::milliseconds tick_interval() const { return heartbeat_interval_ / 4; }
  // Tells the broker this replica leaves (briefly lingering so it goes out), then closes.
  void close();

 private:
  void connect();
  void send_control(const std::string& payload);

  zmq::context_t& context_;
  const std::string endpoint_;
  const std::string name_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::chrono::milliseconds heartbeat_interval_;
  std::chrono::milliseconds heartbeat_timeout_;
  bool registered_ = false;
  bool start_over_ = false;  // the broker does not know this connection
  bool draining_ = false;
  Clock::time_point last_heard_;
  Clock::time_point last_sent_;
};

}  // namespace llmk::ipc
