#include "ipc/http_server.hpp"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>

#include "core/error.hpp"
#include "ipc/access.hpp"
#include "ipc/errors.hpp"
#include "ipc/openai.hpp"
#include "ipc/sglang_api.hpp"
#include "ipc/zmq_protocol.hpp"  // dump_json

namespace llmk::ipc {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// One request's events, filled by the backend, drained by the handler.
struct Pending {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<RequestEvent> events;

  void push(const RequestEvent& ev) {
    {
      std::lock_guard lock(mutex);
      events.push_back(ev);
    }
    ready.notify_one();
  }
  std::vector<RequestEvent> take(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    ready.wait_for(lock, timeout, [&] { return !events.empty(); });
    std::vector<RequestEvent> out(std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
    events.clear();
    return out;
  }
};

// The ids of requests the backend still holds; shared with callbacks,
// which may run after the server is gone.
struct LiveSet {
  std::mutex mutex;
  std::set<std::string> ids;
  size_t size() {
    std::lock_guard lock(mutex);
    return ids.size();
  }
};

void write_error(httplib::Response& res, const ErrorReply& error) {
  res.status = error.http_status;
  if (error.retry_after_s > 0 || error.http_status == 503)
    res.set_header("Retry-After", std::to_string(std::max(1, error.retry_after_s)));
  res.set_content(dump_json(to_openai_json(error)), "application/json");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace

std::pair<std::string, int> split_host_port(const std::string& address, const std::string& key) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon > 0 && colon + 1 < address.size()) {
    try {
      size_t used = 0;
      port = std::stoi(address.substr(colon + 1), &used);
      if (used != address.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535) {
    throw Error(ErrorCode::invalid_config, key + " = '" + address + "' is not HOST:PORT (e.g. 127.0.0.1:8000)");
  }
  return {address.substr(0, colon), port};
}

struct HttpServer::Impl {
  Backend& backend;
  Metrics& metrics;
  HttpServerOptions options;
  httplib::Server server;
  std::atomic<bool> draining{false};
  std::shared_ptr<LiveSet> live = std::make_shared<LiveSet>();
  std::atomic<uint64_t> next_id{0};
  HttpAccess access;

  Impl(Backend& b, Metrics& m, HttpServerOptions o)
      : backend(b), metrics(m), options(std::move(o)), access(b, m, options.auth, options.request_timeout_s) {}

  void reject(httplib::Response& res, const ErrorReply& error) {
    metrics.on_rejected(Frontend::http, error.code);
    write_error(res, error);
  }

  // The API key check of every route but the open ones (401).
  bool authorized(const httplib::Request& req, httplib::Response& res, std::string& key_name) {
    const auto denied = access.authenticate(req.path, req.get_header_value("Authorization"),
                                            req.get_header_value("x-api-key"), key_name);
    if (denied) write_error(res, *denied);
    return !denied;
  }
  // A route's handler behind the key check. The check runs once the body
  // is read, so a refused client's kept-alive connection stays in step.
  httplib::Server::Handler guarded(httplib::Server::Handler handler) {
    return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      std::string key_name;
      if (authorized(req, res, key_name)) handler(req, res);
    };
  }
  // The key's limits and the request's deadline (ipc/access.hpp); nullopt
  // once the refusal is written.
  std::optional<HttpAccess::Ticket> admit(const httplib::Request& req, httplib::Response& res) {
    std::string key_name;
    if (!authorized(req, res, key_name)) return std::nullopt;
    auto admitted = access.admit(key_name, req.body);
    if (auto* ticket = std::get_if<HttpAccess::Ticket>(&admitted)) return *ticket;
    write_error(res, std::get<ErrorReply>(admitted));
    return std::nullopt;
  }

  std::shared_ptr<Pending> submit(Request request, const HttpAccess::Ticket& ticket = {}) {
    auto pending = std::make_shared<Pending>();
    {
      std::lock_guard lock(live->mutex);
      live->ids.insert(request.id);
    }
    const std::string id = request.id;
    backend.submit(std::move(request), access.watch(ticket, id, [pending, live = live](const RequestEvent& ev) {
      if (ev.request_done) {
        std::lock_guard lock(live->mutex);
        live->ids.erase(ev.request_id);
      }
      pending->push(ev);
    }));
    return pending;
  }

  void handle_openai(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (draining) return reject(res, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
    OpenAiRequest parsed;
    try {
      parsed = parse_openai_request(endpoint, req.body, backend);
    } catch (const std::exception& e) {
      return reject(res, error_reply(e));
    }
    const bool chat = endpoint == OpenAiEndpoint::chat;
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
    auto response = std::make_shared<OpenAiResponse>(endpoint, id, backend.model_info().name, backend,
                                                     parsed.request.sampling.n,
                                                     parsed.request.sampling.logprobs >= 0);
    const auto ticket = admit(req, res);
    if (!ticket) return;
    serve_request(id, std::move(parsed.request), response, parsed.stream, parsed.include_usage, res, *ticket);
  }

  // SGLang's native POST /generate (ipc/sglang_api.hpp).
  void handle_sglang_generate(const httplib::Request& req, httplib::Response& res) {
    if (draining) return reject(res, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
    SglangGenerateRequest parsed;
    try {
      parsed = parse_sglang_generate(req.body, backend);
    } catch (const std::exception& e) {
      return reject(res, error_reply(e));
    }
    const std::string id = "gen-" + std::to_string(++next_id);
    // The engine's id stays the server's (unique among live requests); a
    // client's rid is only echoed.
    auto response = std::make_shared<SglangResponse>(parsed.rid.empty() ? id : parsed.rid, parsed.request.sampling.n);
    const auto ticket = admit(req, res);
    if (!ticket) return;
    serve_request(id, std::move(parsed.request), response, parsed.stream, false, res, *ticket);
  }

  // SGLang's GET /health_generate: healthy when the engine generates one
  // token now, not only when the process answers.
  void handle_health_generate(httplib::Response& res) {
    const auto unhealthy = [&](const std::string& why) {
      res.status = 503;
      res.set_content(dump_json({{"status", "unhealthy"}, {"reason", why}}), "application/json");
    };
    if (draining) return unhealthy("draining");
    Request probe;
    const std::string id = "health-" + std::to_string(++next_id);
    probe.id = id;
    probe.prompt = "health";
    probe.sampling.temperature = 0;
    probe.sampling.max_tokens = 1;
    probe.sampling.ignore_eos = true;
    auto pending = submit(std::move(probe));
    const auto deadline = Clock::now() + options.health_generate_timeout;
    while (Clock::now() < deadline) {
      for (const auto& ev : pending->take(std::chrono::milliseconds(50))) {
        if (ev.finish_reason == FinishReason::error) return unhealthy(ev.error);
        if (ev.request_done) {
          res.set_content(dump_json({{"status", "ok"}}), "application/json");
          return;
        }
      }
    }
    backend.cancel(id);
    unhealthy("no token within " + std::to_string(options.health_generate_timeout.count()) + " ms");
  }

  // Submits a parsed request and answers it: one JSON body, or (stream)
  // server-sent events ending in [DONE]. `Response` is OpenAiResponse or
  // SglangResponse.
  template <typename Response>
  void serve_request(const std::string& id, Request request, std::shared_ptr<Response> response, bool stream,
                     bool include_usage, httplib::Response& res, const HttpAccess::Ticket& ticket) {
    request.id = id;
    auto pending = submit(std::move(request), ticket);

    if (!stream) {
      for (;;) {
        for (const auto& ev : pending->take(options.keepalive_interval)) {
          if (ev.finished) metrics.on_finished(Frontend::http, ev);
          if (ev.finish_reason == FinishReason::error) {
            if (!ev.request_done) backend.cancel(id);
            return write_error(res, error_reply(ev.error_code, ev.error));
          }
          response->add(ev);
          if (ev.request_done) return res.set_content(dump_json(response->response()), "application/json");
        }
      }
    }

    // Streaming. Early refusals (bad prompt, queue full) still get their
    // status code: wait briefly for the first event before committing to 200.
    auto first = pending->take(options.first_event_wait);
    if (!first.empty() && first.front().finish_reason == FinishReason::error) {
      metrics.on_finished(Frontend::http, first.front());
      if (!first.front().request_done) backend.cancel(id);
      return write_error(res, error_reply(first.front().error_code, first.front().error));
    }
    auto backlog = std::make_shared<std::vector<RequestEvent>>(std::move(first));
    auto finished = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, id, pending, response, backlog, finished, include_usage](size_t, httplib::DataSink& sink) {
          try {
            return write_events(id, *pending, *response, *backlog, *finished, include_usage, sink);
          } catch (const std::exception& e) {
            spdlog::error("http: stream of {}: {}", id, e.what());
            backend.cancel(id);
            *finished = true;
            return false;
          }
        },
        [this, id, finished](bool) {
          if (!*finished) backend.cancel(id);  // the connection ended before the request did
        });
  }

  // One call of the SSE content provider: writes what events are ready (or
  // a keepalive comment); false when the client is gone.
  template <typename Response>
  bool write_events(const std::string& id, Pending& pending, Response& response,
                    std::vector<RequestEvent>& backlog, bool& finished, bool include_usage,
                    httplib::DataSink& sink) {
    auto events = std::move(backlog);
    backlog.clear();
    if (events.empty()) events = pending.take(options.keepalive_interval);
    const auto disconnected = [&] {
      spdlog::debug("http: client of {} went away, cancelling it", id);
      backend.cancel(id);
      finished = true;
      return false;
    };
    if (events.empty()) return sink.write(": keepalive\n\n", 13) ? true : disconnected();
    std::string out;
    bool done = false;
    for (const auto& ev : events) {
      if (ev.finished) metrics.on_finished(Frontend::http, ev);
      if (ev.finish_reason == FinishReason::error) {
        out += sse(to_openai_json(error_reply(ev.error_code, ev.error)));
        if (!ev.request_done) backend.cancel(id);
        done = true;
        break;
      }
      for (const auto& chunk : response.chunks(ev)) out += sse(chunk);
      done = ev.request_done;
    }
    if (done) {
      if (include_usage) out += sse(response.usage_chunk());
      out += "data: [DONE]\n\n";
    }
    if (!sink.write(out.data(), out.size())) return disconnected();
    if (done) {
      finished = true;
      sink.done();
    }
    return true;
  }

  void install_routes() {
    server.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      handle_openai(OpenAiEndpoint::completions, req, res);
    }));
    server.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
      handle_openai(OpenAiEndpoint::chat, req, res);
    }));
    server.Post("/generate", guarded([this](const httplib::Request& req, httplib::Response& res) {
      handle_sglang_generate(req, res);
    }));
    server.Get("/health_generate", guarded([this](const httplib::Request&, httplib::Response& res) {
      handle_health_generate(res);
    }));
    // The routers ask for /server_info and /model_info first, then the
    // get_ spellings of older SGLang.
    for (const char* path : {"/get_server_info", "/server_info"}) {
      server.Get(path, guarded([this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump_json(sglang_server_info(backend, metrics.replica_name())), "application/json");
      }));
    }
    server.Get("/get_load", guarded([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(sglang_load(backend)), "application/json");
    }));
    for (const char* path : {"/get_model_info", "/model_info"}) {
      server.Get(path, guarded([this](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump_json(sglang_model_info(backend)), "application/json");
      }));
    }
    server.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
      const ModelInfo model = backend.model_info();
      const json body = {{"object", "list"},
                         {"data", json::array({{{"id", model.name},
                                                {"object", "model"},
                                                {"created", 0},
                                                {"owned_by", "llmk"},
                                                {"max_model_len", model.max_context}}})}};
      res.set_content(dump_json(body), "application/json");
    }));
    server.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
      res.status = draining ? 503 : 200;
      res.set_content(dump_json({{"status", draining ? "draining" : "ok"}}), "application/json");
    }));
    server.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(backend.stats()), "text/plain; version=0.0.4; charset=utf-8");
    }));
    // The routers POST /flush_cache without a body or Content-Length, which
    // cpp-httplib refuses before routing; a pre-routing handler answers
    // first (GET too, as SGLang's worker does).
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path != "/flush_cache" || (req.method != "POST" && req.method != "GET"))
        return httplib::Server::HandlerResponse::Unhandled;
      std::string key_name;
      if (!authorized(req, res, key_name)) return httplib::Server::HandlerResponse::Handled;
      try {
        res.set_content(dump_json(sglang_flush_cache(backend)), "application/json");
      } catch (const Error& e) {
        write_error(res, error_reply(e.code(), e.what()));
      }
      return httplib::Server::HandlerResponse::Handled;
    });
    // Statuses cpp-httplib produces itself (unknown route 404, body above
    // the limit 413, ...) get the OpenAI error body too.
    server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        write_error(res, error_reply(ProtocolFailure::payload_too_large,
                                     "the request body exceeds server.max_body_bytes = " +
                                         std::to_string(options.max_body_bytes)));
      } else if (res.status == 404) {
        write_error(res, error_reply(ProtocolFailure::unknown_type, "no route for " + req.method + " " + req.path));
      } else {
        const int status = res.status;
        // cpp-httplib refuses a POST with neither Content-Length nor a
        // chunked body before routing (a bodiless POST to any route but
        // /flush_cache, which the pre-routing handler answers).
        const bool no_length = req.method == "POST" && !req.has_header("Content-Length") &&
                               req.get_header_value("Transfer-Encoding") != "chunked";
        ErrorReply e = error_reply(ProtocolFailure::malformed,
                                   req.method + " " + req.path + ": the request could not be read" +
                                       (no_length ? " (a POST needs a Content-Length header)" : ""));
        e.http_status = status;
        write_error(res, e);
      }
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        write_error(res, error_reply(ErrorCode::internal, e.what()));
      } catch (...) {
        write_error(res, error_reply(ErrorCode::internal, "unknown exception"));
      }
    });
  }
};

HttpServer::HttpServer(Backend& backend, Metrics& metrics, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(backend, metrics, std::move(options))) {
  ::signal(SIGPIPE, SIG_IGN);  // a vanished client must fail a write, not kill the server
  auto [host, port] = split_host_port(impl_->options.address, "server.http");
  host_ = host;
  const int num_threads = std::max(2, impl_->options.num_threads);
  impl_->server.new_task_queue = [num_threads] { return new httplib::ThreadPool(static_cast<size_t>(num_threads)); };
  impl_->server.set_payload_max_length(impl_->options.max_body_bytes);
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second server
  // share the port silently; SO_REUSEADDR alone makes a busy port an error.
  int listen_fd = -1;
  impl_->server.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  // Streams are many small writes: no Nagle delay (40 ms per write with
  // delayed ACKs). Keep-alive connections serve many requests.
  impl_->server.set_tcp_nodelay(true);
  impl_->server.set_keep_alive_max_count(1000);
  impl_->install_routes();
  if (port == 0) {
    port_ = impl_->server.bind_to_any_port(host);
  } else {
    port_ = impl_->server.bind_to_port(host, port) ? port : -1;
  }
  // cpp-httplib listens with a backlog of 5: a burst of clients would wait
  // for SYN retransmits (1 s). Listening again only raises the backlog.
  if (port_ > 0 && listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  if (port_ <= 0) {
    throw Error(ErrorCode::invalid_config, "cannot listen for HTTP on " + impl_->options.address +
                                               " (server.http): the address is in use or not available");
  }
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() is a no-op until the server runs: wait for it.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start_draining() { impl_->draining = true; }

size_t HttpServer::num_live() const { return impl_->live->size(); }

void HttpServer::cancel_all() {
  std::set<std::string> ids;
  {
    std::lock_guard lock(impl_->live->mutex);
    ids = impl_->live->ids;
  }
  for (const auto& id : ids) impl_->backend.cancel(id);
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  impl_->draining = true;
  cancel_all();
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (num_live() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->server.stop();
  thread_.join();
}

}  // namespace llmk::ipc
