// Shared helpers of the ipc tests: a raw ZeroMQ peer, running commands
// (curl, python3, llmk), polling for a condition with a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "support/command.hpp"

namespace llmk::test {

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Waits until pred() holds or the timeout passes; returns pred().
inline bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A raw TCP connection to 127.0.0.1:port (the caller closes it).
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  return fd;
}

// Whether the server closed `fd` (EOF or reset) within `timeout`, reading
// and dropping whatever it sent before.
inline bool closed_by_server(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char scratch[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (::recv(fd, scratch, sizeof scratch, 0) <= 0) return true;
  }
  return false;
}

// A DEALER socket speaking raw frames, for malformed-input tests.
class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send_frames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  void send_json(const nlohmann::json& j) { send_frames({j.dump()}); }
  // The next message's frames, or empty on timeout.
  std::vector<std::string> recv_frames(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return {};
    std::vector<zmq::message_t> msgs;
    (void)zmq::recv_multipart(socket_, std::back_inserter(msgs));
    std::vector<std::string> out;
    for (auto& m : msgs) out.push_back(m.to_string());
    return out;
  }
  // The next message that is not a keepalive, parsed (null on timeout).
  nlohmann::json recv_json(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    for (;;) {
      auto frames = recv_frames(timeout);
      if (frames.empty()) return nullptr;
      auto j = nlohmann::json::parse(frames.back());
      if (j.value("type", "") != "keepalive") return j;
    }
  }
  void close() { socket_.close(); }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

}  // namespace llmk::test

#include <filesystem>
#include <fstream>
#include <atomic>
#include <unistd.h>

namespace llmk::test {

struct HttpResult {
  int status = 0;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// One HTTP request through curl (the body travels in a temporary file, so
// any bytes, valid UTF-8 or not, reach the server unchanged).
inline HttpResult curl(int port, const std::string& method, const std::string& path, const std::string& body = "",
                       const std::string& extra_args = "") {
  static std::atomic<int> counter{0};
  const auto file = std::filesystem::temp_directory_path() /
                    ("llmk_ipc_body_" + std::to_string(::getpid()) + "_" + std::to_string(++counter));
  std::string cmd = "curl -sS -N --max-time 30 -o - -w '\\n%{http_code}' -X " + method + " " + extra_args + " ";
  if (!body.empty() || method == "POST") {
    std::ofstream(file, std::ios::binary) << body;
    cmd += "-H 'Content-Type: application/json' --data-binary @" + file.string() + " ";
  }
  cmd += shell_quote("http://127.0.0.1:" + std::to_string(port) + path) + " 2>/dev/null";
  const CommandResult r = run_command(cmd);
  std::filesystem::remove(file);
  HttpResult out;
  const size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return out;
  out.body = r.out.substr(0, nl);
  out.status = std::atoi(r.out.c_str() + nl + 1);
  return out;
}

// The "data: ..." payloads of a server-sent event stream, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace llmk::test
