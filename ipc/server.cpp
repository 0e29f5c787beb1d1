#include "ipc/server.hpp"

#include <spdlog/spdlog.h>

#include <thread>

#include "ipc/zmq_curve.hpp"

namespace llmk::ipc {

Server::Server(Backend& backend, ServerOptions options) : backend_(backend), options_(std::move(options)) {
  if (!options_.zmq.empty() || !options_.zmq_broker.empty()) {
    ZmqServerOptions z;
    z.endpoint = options_.zmq;
    z.broker = options_.zmq_broker;
    z.replica_name = options_.replica_name.empty() ? options_.http : options_.replica_name;
    z.max_message_bytes = options_.max_body_bytes;
    z.request_timeout_s = options_.request_timeout_s;
    if (!options_.auth.curve_secret_key_file.empty()) {
      z.curve_secret_key = read_curve_key_file(options_.auth.curve_secret_key_file, "server.auth.curve_secret_key_file");
      z.curve_allowed_keys_file = options_.auth.curve_allowed_keys_file;
    }
    zmq_ = std::make_unique<ZmqServer>(backend_, metrics_, z);
    spdlog::info("serving ZeroMQ protocol v1 {} {}", z.broker.empty() ? "on" : "as a worker of the broker at",
                 zmq_->endpoint());
  }
  if (!options_.http.empty()) {
    HttpServerOptions h;
    h.address = options_.http;
    h.max_body_bytes = options_.max_body_bytes;
    h.num_threads = options_.http_threads;
    h.auth = options_.auth;
    h.request_timeout_s = options_.request_timeout_s;
    h.tls_cert_file = options_.tls.cert_file;
    h.tls_key_file = options_.tls.key_file;
    h.io_timeout = options_.http_io_timeout;
    h.poll = options_.poll;
    http_ = std::make_unique<HttpServer>(backend_, metrics_, h);
    spdlog::info("serving the OpenAI-compatible HTTP API on {}://{}:{}", h.tls_cert_file.empty() ? "http" : "https",
                 http_->host(), http_->port());
  }
  std::string name = options_.replica_name;
  if (name.empty()) name = http_ ? http_->host() + ":" + std::to_string(http_->port()) : zmq_ ? zmq_->endpoint() : "";
  metrics_.set_replica_name(name);
}

Server::~Server() {
  if (http_) http_->stop();
  if (zmq_) zmq_->stop();
}

size_t Server::num_live() const {
  return (zmq_ ? zmq_->num_live() : 0) + (http_ ? http_->num_live() : 0);
}

size_t Server::drain_and_stop() {
  if (zmq_) zmq_->start_draining();
  if (http_) http_->start_draining();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.drain_timeout_s);
  if (num_live() > 0) spdlog::info("draining {} live request(s), up to {} s", num_live(), options_.drain_timeout_s);
  while (num_live() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const size_t num_cancelled = num_live();
  if (num_cancelled > 0) {
    spdlog::warn("drain timeout: cancelling {} request(s)", num_cancelled);
    if (zmq_) zmq_->cancel_all();
    if (http_) http_->cancel_all();
  }
  if (http_) http_->stop();
  if (zmq_) zmq_->stop();
  return num_cancelled;
}

}  // namespace llmk::ipc
