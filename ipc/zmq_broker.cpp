#include "ipc/zmq_broker.hpp"

#include <spdlog/spdlog.h>

#include <zmq.hpp>

#include "core/error.hpp"

namespace llmk::ipc {

struct ZmqBroker::Sockets {
  zmq::context_t context{1};
  zmq::socket_t clients{context, zmq::socket_type::router};
  zmq::socket_t workers{context, zmq::socket_type::dealer};
  zmq::socket_t control{context, zmq::socket_type::pair};  // the proxy's end of the steering pair
  zmq::socket_t steer{context, zmq::socket_type::pair};    // stop() sends TERMINATE here
};

ZmqBroker::ZmqBroker(ZmqBrokerOptions options) : sockets_(std::make_unique<Sockets>()) {
  Sockets& s = *sockets_;
  for (zmq::socket_t* socket : {&s.clients, &s.workers}) {
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, 1 << 20);
    socket->set(zmq::sockopt::rcvhwm, 1 << 20);
    socket->set(zmq::sockopt::heartbeat_ivl, options.heartbeat_interval_ms);
    socket->set(zmq::sockopt::heartbeat_timeout, options.heartbeat_timeout_ms);
  }
  const auto bind = [](zmq::socket_t& socket, const std::string& endpoint, const char* what) {
    try {
      socket.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error(ErrorCode::invalid_config, std::string("cannot bind the broker's ") + what + " endpoint " +
                                                 endpoint + ": " + e.what());
    }
    return socket.get(zmq::sockopt::last_endpoint);
  };
  clients_endpoint_ = bind(s.clients, options.clients, "clients");
  workers_endpoint_ = bind(s.workers, options.workers, "workers");
  const std::string control = "inproc://llmk-broker-control";
  s.control.bind(control);
  s.steer.connect(control);
  thread_ = std::thread([this] {
    Sockets& s = *sockets_;
    try {
      zmq::proxy_steerable(s.clients, s.workers, zmq::socket_ref(), s.control);
    } catch (const zmq::error_t& e) {
      if (e.num() != ETERM) spdlog::error("broker: {}", e.what());
    }
  });
}

ZmqBroker::~ZmqBroker() { stop(); }

void ZmqBroker::stop() {
  if (!thread_.joinable()) return;
  sockets_->steer.send(zmq::str_buffer("TERMINATE"), zmq::send_flags::none);
  thread_.join();
}

}  // namespace llmk::ipc
