#include "ipc/broker_link.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "ipc/zmq_protocol.hpp"

namespace llmk::ipc {

using nlohmann::json;

BrokerLink::BrokerLink(zmq::context_t& context, std::string endpoint, std::string name, int heartbeat_interval_ms,
                       int heartbeat_timeout_ms)
    : context_(context),
      endpoint_(std::move(endpoint)),
      name_(name.empty() ? "pid " + std::to_string(::getpid()) : std::move(name)),
      heartbeat_interval_(std::max(heartbeat_interval_ms, 10)),
      heartbeat_timeout_(std::max(heartbeat_timeout_ms, 2 * std::max(heartbeat_interval_ms, 10))) {
  connect();
}

BrokerLink::~BrokerLink() { close(); }

void BrokerLink::connect() {
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  zmq::socket_t& s = *socket_;
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 1 << 20);
  s.set(zmq::sockopt::rcvhwm, 1 << 20);
  // ZMTP heartbeats drop a dead TCP connection so libzmq reconnects.
  s.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(heartbeat_interval_.count()));
  s.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(heartbeat_timeout_.count()));
  try {
    s.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_config,
                "cannot connect to the ZeroMQ broker " + endpoint_ + " (server.zmq_broker): " + e.what());
  }
  registered_ = false;
  last_heard_ = Clock::now();
  send_control(dump_json({{"v", zmq_protocol_version}, {"type", "register"}, {"name", name_},
                          {"draining", draining_}}));
}

void BrokerLink::send_control(const std::string& payload) {
  // Never blocks: a message that cannot be queued is lost, and the
  // heartbeat timeout recovers from that.
  if (socket_->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    socket_->send(zmq::buffer(payload), zmq::send_flags::none);
  }
  last_sent_ = Clock::now();
}

void BrokerLink::on_control(std::string_view payload) {
  const json msg = json::parse(payload, nullptr, false);
  if (!msg.is_object() || !msg.contains("type") || !msg["type"].is_string()) return;
  if (msg["type"] == "registered") {
    // The broker's heartbeat settings, so both sides agree on them.
    if (msg.value("heartbeat_ms", 0) > 0) heartbeat_interval_ = std::chrono::milliseconds(msg["heartbeat_ms"]);
    if (msg.value("heartbeat_timeout_ms", 0) > 0) {
      heartbeat_timeout_ = std::chrono::milliseconds(msg["heartbeat_timeout_ms"]);
    }
    if (!registered_) spdlog::info("zmq: registered as '{}' with the broker at {}", name_, endpoint_);
    registered_ = true;
  } else if (msg["type"] == "register_again") {
    start_over_ = true;
  }
}

bool BrokerLink::tick(bool draining) {
  const auto now = Clock::now();
  if (start_over_ || now - last_heard_ > heartbeat_timeout_) {
    const auto silent_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_).count();
    if (start_over_) {
      spdlog::warn("zmq: the broker at {} dropped this replica: reconnecting and registering again", endpoint_);
    } else if (registered_) {
      spdlog::warn("zmq: the broker at {} was silent for {} ms: reconnecting and registering again", endpoint_,
                   silent_ms);
    }
    start_over_ = false;
    socket_->close();
    connect();
    return true;
  }
  if (draining != draining_ || now - last_sent_ >= heartbeat_interval_) {
    draining_ = draining;
    send_control(dump_json({{"v", zmq_protocol_version}, {"type", "heartbeat"}, {"draining", draining_}}));
  }
  return false;
}

void BrokerLink::close() {
  if (!socket_ || !socket_->handle()) return;
  socket_->set(zmq::sockopt::linger, 200);
  send_control(dump_json({{"v", zmq_protocol_version}, {"type", "unregister"}}));
  socket_->close();
}

}  // namespace llmk::ipc
