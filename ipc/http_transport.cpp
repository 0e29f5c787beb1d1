#include "ipc/http_transport.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "ipc/io_watchdog.hpp"

namespace llmk::ipc {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// Whether `fd` has something to read (or hung up) within `timeout`.
bool wait_readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

// A response was sent before the request body was read (413): stop
// sending, then read and drop what the client still sends, so closing does
// not reset the connection before the client has read the answer.
void lingering_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  char scratch[16384];
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline && wait_readable(fd, std::chrono::milliseconds(200))) {
    if (::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT) <= 0) break;
  }
}

using BeastRequest = http::request<http::string_body>;

template <class Stream>
class Connection final : public HttpExchange {
 public:
  Connection(Stream& stream, int fd, HttpRequest request, BeastRequest* raw, bool keep_alive)
      : stream_(stream), fd_(fd), request_(std::move(request)), raw_(raw), keep_alive_(keep_alive) {}

  const HttpRequest& request() const override { return request_; }
  bool keep_alive() const { return keep_alive_ && !ws_ && !failed_; }
  bool answered() const { return answered_; }

  void respond(int status, const std::string& content_type, std::string body, const HttpHeaders& headers) override {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "llmk");
    if (!content_type.empty()) res.set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) res.set(name, value);
    res.keep_alive(keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    answered_ = true;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    http::write(stream_, res, ec);
    if (ec) failed_ = true;
  }

  bool start_stream(const std::string& content_type, const HttpHeaders& headers) override {
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::server, "llmk");
    res.set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) res.set(name, value);
    res.keep_alive(keep_alive());
    res.chunked(true);
    http::response_serializer<http::empty_body> serializer{res};
    answered_ = true;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    http::write_header(stream_, serializer, ec);
    return ok(ec);
  }
  bool write(std::string_view data) override {
    if (failed_) return false;
    if (data.empty()) return true;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    net::write(stream_, http::make_chunk(net::const_buffer(data.data(), data.size())), ec);
    return ok(ec);
  }
  bool end_stream() override {
    if (failed_) return false;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    net::write(stream_, http::make_chunk_last(), ec);
    return ok(ec);
  }

  bool accept_websocket() override {
    ws_ = std::make_unique<websocket::stream<Stream&>>(stream_);
    ws_->text(true);
    ws_->read_message_max(max_message_bytes_);
    answered_ = true;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    ws_->accept(*raw_, ec);
    return ok(ec);
  }
  std::optional<std::string> ws_read(std::chrono::milliseconds timeout) override {
    if (!ws_ || failed_) return std::nullopt;
    if (!wait_readable(fd_, timeout)) return std::nullopt;
    beast::flat_buffer buffer;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    ws_->read(buffer, ec);
    if (!ok(ec)) return std::nullopt;
    return beast::buffers_to_string(buffer.data());
  }
  bool ws_write(std::string_view text) override {
    if (!ws_ || failed_) return false;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    ws_->write(net::const_buffer(text.data(), text.size()), ec);
    return ok(ec);
  }
  bool ws_ping() override {
    if (!ws_ || failed_) return false;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    ws_->ping({}, ec);
    return ok(ec);
  }
  void ws_close() override {
    if (!ws_ || failed_) return;
    beast::error_code ec;
    IoWatchdog::Armed armed(watchdog_, fd_, io_timeout_);
    ws_->close(websocket::close_code::normal, ec);
    failed_ = true;  // nothing more goes out on this connection
  }

  Wake wait(int event_fd, std::chrono::milliseconds timeout) override {
    if (failed_) return Wake::hung_up;
    // Only the peer's shutdown is watched, not its data: a pipelined request
    // (or a WebSocket pong) must not wake a waiting handler.
    pollfd fds[2] = {{event_fd, POLLIN, 0}, {fd_, POLLRDHUP, 0}};
    if (::poll(fds, 2, static_cast<int>(timeout.count())) <= 0) return Wake::timeout;
    if (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) return Wake::hung_up;
    if (fds[0].revents & POLLIN) return Wake::ready;
    return Wake::timeout;
  }

  size_t max_message_bytes_ = 1 << 20;
  IoWatchdog* watchdog_ = nullptr;          // bounds each blocking read and write
  std::chrono::milliseconds io_timeout_{0};  // by this long (0: unbounded)

 private:
  bool ok(const beast::error_code& ec) {
    if (ec) failed_ = true;
    return !ec;
  }

  Stream& stream_;
  const int fd_;
  const HttpRequest request_;
  BeastRequest* raw_;
  const bool keep_alive_;
  bool answered_ = false;
  bool failed_ = false;
  std::unique_ptr<websocket::stream<Stream&>> ws_;
};

HttpRequest to_request(const BeastRequest& raw) {
  HttpRequest r;
  r.method = std::string(raw.method_string());
  const std::string target(raw.target());
  const size_t q = target.find('?');
  r.path = target.substr(0, q);
  if (q != std::string::npos) r.query = target.substr(q + 1);
  for (const auto& field : raw) r.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  r.body = raw.body();
  r.websocket_upgrade = websocket::is_upgrade(raw);
  return r;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.first, name)) return true;
  return false;
}

std::optional<std::string> HttpRequest::query_param(std::string_view name) const {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string::npos) end = query.size();
    const std::string_view part(query.data() + pos, end - pos);
    const size_t eq = part.find('=');
    if (part.substr(0, eq) == name) return std::string(eq == std::string_view::npos ? "" : part.substr(eq + 1));
    pos = end + 1;
  }
  return std::nullopt;
}

struct HttpTransport::Impl {
  HttpTransportOptions options;
  Handler handler;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::optional<ssl::context> tls;
  int port = 0;

  std::mutex mutex;
  std::condition_variable accepted_ready;
  std::deque<tcp::socket> accepted;
  std::set<int> open_fds;
  IoWatchdog watchdog;
  bool stopping = false;
  std::thread accept_thread;
  std::vector<std::thread> workers;

  void load_tls() {
    const auto readable = [](const std::string& file, const std::string& key) {
      if (!std::ifstream(file).good())
        throw Error(ErrorCode::invalid_config, key + " = '" + file + "': the file cannot be read");
    };
    readable(options.tls_cert_file, "server.tls.cert_file");
    readable(options.tls_key_file, "server.tls.key_file");
    tls.emplace(ssl::context::tls_server);
    tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    beast::error_code ec;
    tls->use_certificate_chain_file(options.tls_cert_file, ec);
    if (ec)
      throw Error(ErrorCode::invalid_config, "server.tls.cert_file = '" + options.tls_cert_file +
                                                 "' is not a PEM certificate chain: " + ec.message());
    tls->use_private_key_file(options.tls_key_file, ssl::context::pem, ec);
    if (ec)
      throw Error(ErrorCode::invalid_config, "server.tls.key_file = '" + options.tls_key_file +
                                                 "' is not a PEM private key for server.tls.cert_file: " + ec.message());
  }

  void bind() {
    beast::error_code ec;
    const auto address = net::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host, ec);
    const std::string where = options.host + ":" + std::to_string(options.port);
    if (ec) throw Error(ErrorCode::invalid_config, "cannot listen for HTTP on " + where + " (server.http): " + ec.message());
    const tcp::endpoint endpoint{address, static_cast<unsigned short>(options.port)};
    acceptor.open(endpoint.protocol(), ec);
    // SO_REUSEADDR only (no SO_REUSEPORT): a busy port is an error, not a silently shared one.
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      throw Error(ErrorCode::invalid_config, "cannot listen for HTTP on " + where +
                                                 " (server.http): the address is in use or not available (" +
                                                 ec.message() + ")");
    }
    port = acceptor.local_endpoint().port();
  }

  void accept_loop() {
    for (;;) {
      tcp::socket socket{io};
      beast::error_code ec;
      acceptor.accept(socket, ec);
      if (ec) {
        if (std::lock_guard lock(mutex); stopping) return;
        // Out of file descriptors and the like: try again shortly.
        spdlog::warn("http: accept failed: {}", ec.message());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);  // streams are many small writes
      std::lock_guard lock(mutex);
      if (stopping) return;
      accepted.push_back(std::move(socket));
      accepted_ready.notify_one();
    }
  }

  void worker_loop() {
    for (;;) {
      std::unique_lock lock(mutex);
      accepted_ready.wait(lock, [&] { return stopping || !accepted.empty(); });
      if (stopping) return;
      tcp::socket socket = std::move(accepted.front());
      accepted.pop_front();
      const int fd = socket.native_handle();
      open_fds.insert(fd);
      lock.unlock();
      try {
        if (tls) {
          beast::ssl_stream<tcp::socket> stream(std::move(socket), *tls);
          // A client that never starts its handshake, or speaks plain HTTP
          // to this port, is dropped; the server goes on serving.
          beast::error_code ec = net::error::timed_out;
          if (wait_readable(fd, options.idle_timeout)) {
            ec = {};
            IoWatchdog::Armed armed(&watchdog, fd, options.io_timeout);
            stream.handshake(ssl::stream_base::server, ec);
          }
          if (!ec) serve(stream, fd, true);
          if (ec) spdlog::debug("http: TLS handshake failed: {}", ec.message());
          lock.lock();
          open_fds.erase(fd);
          lock.unlock();
        } else {
          serve(socket, fd, false);
          lock.lock();
          open_fds.erase(fd);
          lock.unlock();
        }
      } catch (const std::exception& e) {
        spdlog::error("http: connection failed: {}", e.what());
        std::lock_guard relock(mutex);
        open_fds.erase(fd);
      }
    }
  }

  // Serves one connection's requests until it closes, fails, idles out or
  // asks for no keep-alive. The idle wait watches the socket, which cannot
  // see bytes a TLS stream already holds: the first request after a
  // handshake (often read with it) is read without that wait.
  template <class Stream>
  void serve(Stream& stream, int fd, bool tls_first) {
    beast::flat_buffer buffer;
    for (int num_served = 0; num_served < 1000; ++num_served) {
      const bool may_be_buffered = buffer.size() > 0 || (tls_first && num_served == 0);
      if (!may_be_buffered && !wait_readable(fd, options.idle_timeout)) return;
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      beast::error_code ec;
      {
        // The whole request (headers, 100-continue, body) within io_timeout.
        IoWatchdog::Armed armed(&watchdog, fd, options.io_timeout);
        http::read_header(stream, buffer, parser, ec);
        if (!ec && parser.get()[http::field::expect] == "100-continue" &&
            parser.content_length().value_or(0) <= options.max_body_bytes) {
          http::response<http::empty_body> go_on{http::status::continue_, 11};
          http::write(stream, go_on, ec);
        }
        if (!ec && !parser.is_done()) http::read(stream, buffer, parser, ec);
      }
      if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
          ec == net::ssl::error::stream_truncated || ec == net::error::operation_aborted ||
          ec == net::error::bad_descriptor)
        return;
      HttpRequest request;
      if (ec) {
        const bool too_large = ec == http::error::body_limit;
        if (parser.is_header_done()) {
          request.method = std::string(parser.get().method_string());
          request.path = std::string(parser.get().target().substr(0, parser.get().target().find('?')));
        }
        request.read_failure = too_large ? 413 : 400;
        request.read_failure_reason = ec.message();
        Connection<Stream> exchange(stream, fd, std::move(request), nullptr, false);
        exchange.watchdog_ = &watchdog;
        exchange.io_timeout_ = options.io_timeout;
        handler(exchange);
        if (too_large) lingering_close(fd);
        return;
      }
      BeastRequest raw = parser.release();
      Connection<Stream> exchange(stream, fd, to_request(raw), &raw, raw.keep_alive());
      exchange.max_message_bytes_ = options.max_body_bytes;
      exchange.watchdog_ = &watchdog;
      exchange.io_timeout_ = options.io_timeout;
      handler(exchange);
      if (!exchange.answered()) exchange.respond(500, "text/plain", "no answer\n", {});
      if (!exchange.keep_alive()) return;
    }
  }
};

HttpTransport::HttpTransport(HttpTransportOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  if (!impl_->options.tls_cert_file.empty() || !impl_->options.tls_key_file.empty()) {
    if (impl_->options.tls_cert_file.empty() || impl_->options.tls_key_file.empty())
      throw Error(ErrorCode::invalid_config, "server.tls needs both cert_file and key_file (one is missing)");
    impl_->load_tls();
  }
  impl_->bind();
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
  const int num_threads = std::max(2, impl_->options.num_threads);
  for (int i = 0; i < num_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    // Wakes the blocked accept (EINVAL) and every connection's blocked read
    // or wait (hang-up).
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RDWR);
    impl_->accepted.clear();
  }
  impl_->accepted_ready.notify_all();
  impl_->accept_thread.join();
  for (auto& worker : impl_->workers) worker.join();
  beast::error_code ec;
  impl_->acceptor.close(ec);
}

}  // namespace llmk::ipc
