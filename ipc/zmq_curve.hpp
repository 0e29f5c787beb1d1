// ZeroMQ CURVE security for the ZeroMQ front end and its clients, on
// libzmq's own mechanisms: keys are Z85 text (40 characters, as
// zmq_curve_keypair makes them, e.g. `llmk keys curve`); the server
// authenticates clients through a ZAP handler (RFC 27, the inproc endpoint
// inproc://zeromq.zap.01 of the server socket's context) that admits only
// the public keys listed in a file.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

namespace llmk::ipc {

// libzmq was built with CURVE (zmq_has("curve")).
bool has_curve();

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};
// A fresh pair (zmq_curve_keypair); throws Error(unsupported) without CURVE.
CurveKeyPair make_curve_keypair();
// The public key of a Z85 secret key (zmq_curve_public).
std::string curve_public_key(const std::string& secret_key);

// A file's one Z85 key (the first line that is not blank or a '#'
// comment). Throws Error(invalid_config) naming `config_key` and the file.
std::string read_curve_key_file(const std::filesystem::path& file, const std::string& config_key);
// Public keys, one per line: the Z85 key first, anything after it (a
// name) ignored; blank and '#' lines skipped. Throws Error(invalid_config)
// naming the file and line.
std::vector<std::string> parse_allowed_keys(const std::string& text, const std::string& source);

// Makes `socket` a CURVE server with this secret key (before it binds).
void make_curve_server(zmq::socket_t& socket, const std::string& secret_key);
// Makes `socket` a CURVE client of the server with `server_public_key`
// (before it connects).
void make_curve_client(zmq::socket_t& socket, const std::string& server_public_key, const CurveKeyPair& client);

// The ZAP handler of one context: binds inproc://zeromq.zap.01 at once
// (before the server socket binds) and answers on its own thread. A CURVE
// client whose public key is in `allowed_keys_file` is admitted (ZAP 200,
// the user id is the key); any other is refused (400) and its connection
// closed by libzmq. The file is re-read when it changes, so a key removed
// from it is refused from the next connection on.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::filesystem::path allowed_keys_file);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t num_admitted() const { return num_admitted_; }
  uint64_t num_refused() const { return num_refused_; }

 private:
  void run();
  bool allowed(const std::string& z85_key);

  zmq::socket_t socket_;
  const std::filesystem::path file_;
  std::vector<std::string> keys_;
  std::filesystem::file_time_type file_time_{};
  uintmax_t file_size_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> num_admitted_{0};
  std::atomic<uint64_t> num_refused_{0};
  std::thread thread_;
};

}  // namespace llmk::ipc
