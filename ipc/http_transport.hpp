// The HTTP/1.1 transport of the HTTP front end, on Boost.Beast (Asio), with
// TLS through asio::ssl when a certificate is configured. Blocking I/O on a
// fixed pool of connection threads: one thread serves one connection at a
// time (keep-alive included), so a handler may wait for its request's events.
// While a handler waits it also watches its socket (HttpExchange::wait), which
// is how a non-streaming client that hangs up is noticed. No routes here
// (ipc/http_server.cpp has them).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmk::ipc {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?'
  std::string query;   // after '?' ("" when none)
  std::string body;
  HttpHeaders headers;
  bool websocket_upgrade = false;
  // Set when the request could not be read whole: the status to answer
  // (400, 413) and why; the connection closes after the answer.
  int read_failure = 0;
  std::string read_failure_reason;

  std::string header(std::string_view name) const;  // case-insensitive; "" when absent
  bool has_header(std::string_view name) const;
  std::optional<std::string> query_param(std::string_view name) const;
};

// One request's answer on its connection. A handler calls respond() once,
// or start_stream() and then write()s, or, for an upgrade request,
// accept_websocket() and then the ws_ calls. Every write returns false once
// the client is gone.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;

  virtual void respond(int status, const std::string& content_type, std::string body,
                       const HttpHeaders& headers = {}) = 0;
  // A 200 response with a chunked body.
  virtual bool start_stream(const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool end_stream() = 0;

  virtual bool accept_websocket() = 0;
  // The next text message from the client, waiting at most `timeout`;
  // nullopt when the connection closed, failed or the time ran out.
  virtual std::optional<std::string> ws_read(std::chrono::milliseconds timeout) = 0;
  virtual bool ws_write(std::string_view text) = 0;
  virtual bool ws_ping() = 0;
  virtual void ws_close() = 0;

  enum class Wake { ready, timeout, hung_up };
  // Waits until `event_fd` is readable (ready), the client hangs up or its
  // connection fails (hung_up), or `timeout` passes.
  virtual Wake wait(int event_fd, std::chrono::milliseconds timeout) = 0;
};

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free one
  size_t max_body_bytes = 1 << 20;
  int num_threads = 64;  // connections served at once; more wait to be accepted
  // A kept-alive connection with no new request (and a TLS client that does
  // not start its handshake) is closed after this long.
  std::chrono::milliseconds idle_timeout{5000};
  // A request must arrive whole (headers and body), and each write to a
  // client must complete, within this long; a connection that stalls longer
  // is closed, so a slow or stuck client cannot hold a thread. 0: no bound.
  std::chrono::milliseconds io_timeout{30000};
  std::string tls_cert_file;  // both set: every connection speaks TLS
  std::string tls_key_file;
};

class HttpTransport {
 public:
  using Handler = std::function<void(HttpExchange&)>;
  // Binds and starts serving: throws Error(invalid_config) naming the
  // address when it cannot listen there, or the file when a TLS
  // certificate or key cannot be loaded.
  HttpTransport(HttpTransportOptions options, Handler handler);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int port() const;
  // Closes the listener and every open connection (a handler waiting in
  // wait() sees hung_up) and joins the threads.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk::ipc
