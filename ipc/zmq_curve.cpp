#include "ipc/zmq_curve.hpp"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include <zmq_addon.hpp>

#include "core/error.hpp"

namespace llmk::ipc {
namespace {

constexpr size_t kZ85KeyChars = 40;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool valid_z85_key(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, key.c_str()) != nullptr;
}

std::string read_text(const std::filesystem::path& file, const std::string& what) {
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::invalid_config, what + ": cannot read " + file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void send_frames(zmq::socket_t& socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i)
    socket.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

}  // namespace

bool has_curve() { return zmq_has("curve") != 0; }

CurveKeyPair make_curve_keypair() {
  if (!has_curve()) throw Error(ErrorCode::unsupported, "this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  char public_key[kZ85KeyChars + 1];
  char secret_key[kZ85KeyChars + 1];
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    throw Error(ErrorCode::internal, std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  return {public_key, secret_key};
}

std::string curve_public_key(const std::string& secret_key) {
  char public_key[kZ85KeyChars + 1];
  if (!valid_z85_key(secret_key) || zmq_curve_public(public_key, secret_key.c_str()) != 0)
    throw Error(ErrorCode::invalid_argument, "not a Z85 CURVE secret key (40 characters)");
  return public_key;
}

std::string read_curve_key_file(const std::filesystem::path& file, const std::string& config_key) {
  std::istringstream lines(read_text(file, config_key));
  for (std::string line; std::getline(lines, line);) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (!valid_z85_key(line))
      throw Error(ErrorCode::invalid_config, config_key + ": " + file.string() +
                                                 " does not hold a Z85 CURVE key (40 characters, as "
                                                 "`llmk keys curve` writes)");
    return line;
  }
  throw Error(ErrorCode::invalid_config, config_key + ": " + file.string() + " holds no key");
}

std::vector<std::string> parse_allowed_keys(const std::string& text, const std::string& source) {
  std::vector<std::string> keys;
  std::istringstream lines(text);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    if (!valid_z85_key(key))
      throw Error(ErrorCode::invalid_config, source + ":" + std::to_string(line_no) +
                                                 ": not a Z85 CURVE public key (40 characters)");
    keys.push_back(key);
  }
  return keys;
}

void make_curve_server(zmq::socket_t& socket, const std::string& secret_key) {
  if (!has_curve()) throw Error(ErrorCode::unsupported, "CURVE is configured but this libzmq was built without it");
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, secret_key);
  socket.set(zmq::sockopt::zap_domain, std::string("llmk"));
}

void make_curve_client(zmq::socket_t& socket, const std::string& server_public_key, const CurveKeyPair& client) {
  if (!has_curve()) throw Error(ErrorCode::unsupported, "CURVE is asked for but this libzmq was built without it");
  for (const auto* key : {&server_public_key, &client.public_key, &client.secret_key})
    if (!valid_z85_key(*key)) throw Error(ErrorCode::invalid_argument, "a CURVE key is not Z85 (40 characters)");
  socket.set(zmq::sockopt::curve_serverkey, server_public_key);
  socket.set(zmq::sockopt::curve_publickey, client.public_key);
  socket.set(zmq::sockopt::curve_secretkey, client.secret_key);
}

ZapHandler::ZapHandler(zmq::context_t& context, std::filesystem::path allowed_keys_file)
    : socket_(context, zmq::socket_type::rep), file_(std::move(allowed_keys_file)) {
  keys_ = parse_allowed_keys(read_text(file_, "server.auth.curve_allowed_keys_file"), file_.string());
  std::error_code ec;
  file_time_ = std::filesystem::last_write_time(file_, ec);
  file_size_ = std::filesystem::file_size(file_, ec);
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  spdlog::info("zmq: CURVE on, {} client key(s) admitted from {}", keys_.size(), file_.string());
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stopping_ = true;
  thread_.join();
  socket_.close();
}

bool ZapHandler::allowed(const std::string& z85_key) {
  std::error_code ec;
  const auto time = std::filesystem::last_write_time(file_, ec);
  const auto size = ec ? 0 : std::filesystem::file_size(file_, ec);
  if (ec) {
    keys_.clear();  // the file is gone: no client is admitted
  } else if (time != file_time_ || size != file_size_) {
    try {
      std::ifstream in(file_);
      std::ostringstream text;
      text << in.rdbuf();
      keys_ = parse_allowed_keys(text.str(), file_.string());
      spdlog::info("zmq: {} client key(s) admitted from {}", keys_.size(), file_.string());
    } catch (const Error& e) {
      spdlog::error("zmq: {}; keeping the previous client keys", e.what());
    }
    file_time_ = time;
    file_size_ = size;
  }
  for (const auto& k : keys_)
    if (k == z85_key) return true;
  return false;
}

void ZapHandler::run() {
  // RFC 27 request: version, request id, domain, address, identity,
  // mechanism, credentials...; reply: version, request id, status code,
  // status text, user id, metadata.
  while (!stopping_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) continue;
    if (frames.size() < 6) {  // not a ZAP request; a REP socket answers every request all the same
      const std::string id = frames.size() > 1 ? frames[1].to_string() : "";
      send_frames(socket_, {"1.0", id, "500", "malformed ZAP request", "", ""});
      continue;
    }
    const std::string mechanism = frames[5].to_string();
    std::string key;
    if (mechanism == "CURVE" && frames.size() >= 7 && frames[6].size() == 32) {
      char z85[kZ85KeyChars + 1];
      zmq_z85_encode(z85, frames[6].data<uint8_t>(), 32);
      key = z85;
    }
    const bool ok = !key.empty() && allowed(key);
    (ok ? num_admitted_ : num_refused_)++;
    if (!ok) spdlog::info("zmq: refused a {} client{}", mechanism, key.empty() ? "" : " with key " + key);
    send_frames(socket_, {"1.0", frames[1].to_string(), ok ? "200" : "400", ok ? "OK" : "client key not allowed",
                          ok ? key : "", ""});
  }
}

}  // namespace llmk::ipc
