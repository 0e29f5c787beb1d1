#include "ipc/http_server.hpp"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "ipc/embeddings.hpp"
#include "ipc/http_server_impl.hpp"
#include "ipc/openai.hpp"
#include "ipc/sglang_api.hpp"
#include "ipc/zmq_protocol.hpp"  // dump_json

namespace llmk::ipc {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

template <typename Response>
Shaper shaper_of(std::shared_ptr<Response> r) {
  return {[r](const RequestEvent& ev) { return r->chunks(ev); }, [r] { return json(r->usage_chunk()); },
          [r](const RequestEvent& ev) { r->add(ev); }, [r] { return json(r->response()); }};
}

// Events of a request that has no client socket to watch (the health probe).
std::vector<RequestEvent> take_within(Pending& pending, std::chrono::milliseconds timeout) {
  pollfd p{pending.fd(), POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(timeout.count()));
  return pending.take();
}

}  // namespace

void write_error(HttpExchange& ex, const ErrorReply& error) {
  HttpHeaders headers;
  if (error.retry_after_s > 0 || error.http_status == 503)
    headers.emplace_back("Retry-After", std::to_string(std::max(1, error.retry_after_s)));
  ex.respond(error.http_status, "application/json", dump_json(to_openai_json(error)), headers);
}

void write_json(HttpExchange& ex, int status, const json& body) {
  ex.respond(status, "application/json", dump_json(body));
}

TlsFiles parse_tls_options(const std::string& json_text) {
  const auto fail = [](const std::string& key, const std::string& why) {
    throw Error(ErrorCode::invalid_config, key + ": " + why);
  };
  const json root = json::parse(json_text, nullptr, false);
  if (!root.is_object()) fail("server.tls", "expected a mapping {cert_file: PEM, key_file: PEM}, got " + json_text);
  TlsFiles files;
  for (const auto& [name, value] : root.items()) {
    const std::string key = "server.tls." + name;
    if (name != "cert_file" && name != "key_file") fail(key, "unknown key (valid keys of server.tls: cert_file, key_file)");
    if (!value.is_string() || value.get<std::string>().empty()) fail(key, "expected a file path, got " + value.dump());
    const std::string path = value.get<std::string>();
    if (!std::ifstream(path).good()) fail(key, "'" + path + "' cannot be read");
    (name == "cert_file" ? files.cert_file : files.key_file) = path;
  }
  if (files.cert_file.empty() != files.key_file.empty())
    fail(files.cert_file.empty() ? "server.tls.cert_file" : "server.tls.key_file", "required with the other TLS file");
  return files;
}

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

void HttpServer::Impl::reject(HttpExchange& ex, const ErrorReply& error) {
  metrics.on_rejected(Frontend::http, error.code);
  write_error(ex, error);
}

// The API key check of every route but the open ones (401).
bool HttpServer::Impl::authorized(HttpExchange& ex, std::string& key_name) {
  const auto& req = ex.request();
  const auto denied = access.authenticate(req.path, req.header("Authorization"), req.header("x-api-key"), key_name);
  if (denied) write_error(ex, *denied);
  return !denied;
}

// The key's limits and the request's deadline (ipc/access.hpp); nullopt
// once the refusal is written.
std::optional<HttpAccess::Ticket> HttpServer::Impl::admit(HttpExchange& ex, const std::string& key_name,
                                                          const std::string& body) {
  auto admitted = access.admit(key_name, body);
  if (auto* ticket = std::get_if<HttpAccess::Ticket>(&admitted)) return *ticket;
  write_error(ex, std::get<ErrorReply>(admitted));
  return std::nullopt;
}

void HttpServer::Impl::submit_to(Request request, const HttpAccess::Ticket& ticket, Backend::EventCallback on_event) {
  {
    std::lock_guard lock(live->mutex);
    live->ids.insert(request.id);
  }
  const std::string id = request.id;
  backend.submit(std::move(request),
                 access.watch(ticket, id, [on_event = std::move(on_event), live = live](const RequestEvent& ev) {
                   // Handled before the id leaves the live set: once it is
                   // empty, no callback is still inside the server.
                   on_event(ev);
                   if (ev.request_done) {
                     std::lock_guard lock(live->mutex);
                     live->ids.erase(ev.request_id);
                   }
                 }));
}

std::shared_ptr<Pending> HttpServer::Impl::submit(Request request, const HttpAccess::Ticket& ticket) {
  auto pending = std::make_shared<Pending>();
  submit_to(std::move(request), ticket, [pending](const RequestEvent& ev) { pending->post(ev); });
  return pending;
}

// Parses a generation route's body (throws as the parsers do) and names the
// request; the engine's id stays the server's, unique among live requests.
Generation HttpServer::Impl::parse_generation(GenerationRoute route, const std::string& body) {
  Generation g;
  if (route == GenerationRoute::generate) {
    SglangGenerateRequest parsed = parse_sglang_generate(body, backend);
    g.id = "gen-" + std::to_string(++next_id);
    // A client's rid is only echoed.
    g.shaper = shaper_of(std::make_shared<SglangResponse>(parsed.rid.empty() ? g.id : parsed.rid,
                                                          parsed.request.sampling.n));
    g.request = std::move(parsed.request);
    g.stream = parsed.stream;
    return g;
  }
  const auto endpoint = route == GenerationRoute::chat ? OpenAiEndpoint::chat : OpenAiEndpoint::completions;
  OpenAiRequest parsed = parse_openai_request(endpoint, body, backend);
  g.id = (route == GenerationRoute::chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
  g.shaper = shaper_of(std::make_shared<OpenAiResponse>(endpoint, g.id, backend.model_info().name, backend,
                                                        parsed.request.sampling.n,
                                                        parsed.request.sampling.logprobs >= 0, parsed.tool_format));
  g.request = std::move(parsed.request);
  g.stream = parsed.stream;
  g.include_usage = parsed.include_usage;
  return g;
}

StreamStep HttpServer::Impl::stream_step(const std::vector<RequestEvent>& events, Generation& g) {
  StreamStep step;
  for (const auto& ev : events) {
    if (ev.finished) metrics.on_finished(Frontend::http, ev);
    if (ev.finish_reason == FinishReason::error) {
      step.payloads.push_back(dump_json(to_openai_json(error_reply(ev.error_code, ev.error, ev.error_field))));
      step.cancel = !ev.request_done;
      step.done = true;
      break;
    }
    for (const auto& chunk : g.shaper.chunks(ev)) step.payloads.push_back(dump_json(chunk));
    step.done = ev.request_done;
  }
  if (step.done && g.include_usage) step.payloads.push_back(dump_json(g.shaper.usage_chunk()));
  return step;
}

void HttpServer::Impl::handle_generation(GenerationRoute route, HttpExchange& ex, const std::string& key_name) {
  if (draining) return reject(ex, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
  Generation g;
  try {
    g = parse_generation(route, ex.request().body);
  } catch (const std::exception& e) {
    return reject(ex, error_reply(e));
  }
  const auto ticket = admit(ex, key_name, ex.request().body);
  if (!ticket) return;
  g.request.id = g.id;
  auto pending = submit(std::move(g.request), *ticket);
  if (g.stream) return serve_sse(g, *pending, ex);
  serve_plain(g, *pending, ex);
}

// POST /v1/embeddings: every input's vector in turn, each a prefill the
// engine runs between its steps (Backend::embed), in one JSON body. The
// key's limits apply as to a generation request (one concurrency slot while
// it runs).
void HttpServer::Impl::handle_embeddings(HttpExchange& ex, const std::string& key_name) {
  if (draining) return reject(ex, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
  EmbeddingsRequest request;
  try {
    request = parse_embeddings_request(ex.request().body, backend, backend.default_pooling());
  } catch (const std::exception& e) {
    return reject(ex, error_reply(e));
  }
  const auto ticket = admit(ex, key_name, ex.request().body);
  if (!ticket) return;
  try {
    std::vector<std::vector<float>> vectors;
    int64_t prompt_tokens = 0;
    for (const EmbeddingInput& input : request.inputs) {
      const std::vector<int32_t> ids = input.token_ids.empty() ? backend.embedding_ids(input.text) : input.token_ids;
      prompt_tokens += static_cast<int64_t>(ids.size());
      vectors.push_back(backend.embed(ids, request.params));
    }
    access.release(*ticket);
    metrics.on_embeddings(Frontend::http, vectors.size(), prompt_tokens);
    write_json(ex, 200, embeddings_response(vectors, request.base64, backend.model_info().name,
                                            static_cast<int32_t>(prompt_tokens)));
  } catch (const std::exception& e) {
    access.release(*ticket);
    reject(ex, error_reply(e));
  }
}

// One JSON body once the request is done. The client's socket is watched
// meanwhile: a client that hangs up gets its request cancelled at once.
void HttpServer::Impl::serve_plain(Generation& g, Pending& pending, HttpExchange& ex) {
  for (;;) {
    if (ex.wait(pending.fd(), options.keepalive_interval) == HttpExchange::Wake::hung_up) {
      spdlog::debug("http: client of {} went away before its answer, cancelling it", g.id);
      backend.cancel(g.id);
      return;
    }
    for (const auto& ev : pending.take()) {
      if (ev.finished) metrics.on_finished(Frontend::http, ev);
      if (ev.finish_reason == FinishReason::error) {
        if (!ev.request_done) backend.cancel(g.id);
        return write_error(ex, error_reply(ev.error_code, ev.error, ev.error_field));
      }
      g.shaper.add(ev);
      if (ev.request_done) return write_json(ex, 200, g.shaper.response());
    }
  }
}

// Server-sent events ending in [DONE]. Early refusals (bad prompt, queue
// full) still get their status code: the first event is awaited briefly
// before committing to 200.
void HttpServer::Impl::serve_sse(Generation& g, Pending& pending, HttpExchange& ex) {
  const auto gone = [&] {
    spdlog::debug("http: client of {} went away, cancelling it", g.id);
    backend.cancel(g.id);
  };
  std::vector<RequestEvent> first;
  for (const auto until = Clock::now() + options.first_event_wait; first.empty() && Clock::now() < until;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (ex.wait(pending.fd(), std::max(left, std::chrono::milliseconds(1))) == HttpExchange::Wake::hung_up)
      return gone();
    first = pending.take();
  }
  if (!first.empty() && first.front().finish_reason == FinishReason::error) {
    metrics.on_finished(Frontend::http, first.front());
    if (!first.front().request_done) backend.cancel(g.id);
    return write_error(ex, error_reply(first.front().error_code, first.front().error, first.front().error_field));
  }
  if (!ex.start_stream("text/event-stream", {{"Cache-Control", "no-cache"}})) return gone();
  std::vector<RequestEvent> events = std::move(first);
  for (;;) {
    if (events.empty()) {
      const auto wake = ex.wait(pending.fd(), options.keepalive_interval);
      if (wake == HttpExchange::Wake::hung_up) return gone();
      events = pending.take();
      // An idle stream gets a comment: keeps proxies open, finds a gone client.
      if (events.empty()) {
        if (wake == HttpExchange::Wake::timeout && !ex.write(": keepalive\n\n")) return gone();
        continue;
      }
    }
    const StreamStep step = stream_step(events, g);
    events.clear();
    if (step.cancel) backend.cancel(g.id);
    std::string out;
    for (const auto& p : step.payloads) out += "data: " + p + "\n\n";
    if (step.done) out += "data: [DONE]\n\n";
    if (!ex.write(out)) return step.done ? void() : gone();
    if (step.done) {
      ex.end_stream();
      return;
    }
  }
}

// SGLang's GET /health_generate: healthy when the engine generates one
// token now, not only when the process answers.
void HttpServer::Impl::handle_health_generate(HttpExchange& ex) {
  const auto unhealthy = [&](const std::string& why) {
    write_json(ex, 503, {{"status", "unhealthy"}, {"reason", why}});
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
    for (const auto& ev : take_within(*pending, std::chrono::milliseconds(50))) {
      if (ev.finish_reason == FinishReason::error) return unhealthy(ev.error);
      if (ev.request_done) return write_json(ex, 200, {{"status", "ok"}});
    }
  }
  backend.cancel(id);
  unhealthy("no token within " + std::to_string(options.health_generate_timeout.count()) + " ms");
}

// The GET routes that describe the server; false when `path` is none of them.
bool HttpServer::Impl::route_info(HttpExchange& ex) {
  const std::string& path = ex.request().path;
  if (path == "/get_server_info" || path == "/server_info") {
    write_json(ex, 200, sglang_server_info(backend, metrics.replica_name()));
  } else if (path == "/get_load") {
    write_json(ex, 200, sglang_load(backend));
  } else if (path == "/get_model_info" || path == "/model_info") {
    write_json(ex, 200, sglang_model_info(backend));
  } else if (path == "/v1/models") {
    const ModelInfo model = backend.model_info();
    write_json(ex, 200,
               {{"object", "list"},
                {"data", json::array({{{"id", model.name},
                                       {"object", "model"},
                                       {"created", 0},
                                       {"owned_by", "llmk"},
                                       {"max_model_len", model.max_context}}})}});
  } else if (path == "/health") {
    write_json(ex, draining ? 503 : 200, {{"status", draining ? "draining" : "ok"}});
  } else if (path == "/metrics") {
    ex.respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics.render(backend.stats()));
  } else if (path == "/health_generate") {
    handle_health_generate(ex);
  } else {
    return false;
  }
  return true;
}

// Every request: a read failure's answer, the key check, then the route.
void HttpServer::Impl::handle(HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  if (req.read_failure == 413) {
    return write_error(ex, error_reply(ProtocolFailure::payload_too_large,
                                       "the request body exceeds server.max_body_bytes = " +
                                           std::to_string(options.max_body_bytes)));
  }
  if (req.read_failure) {
    ErrorReply e = error_reply(ProtocolFailure::malformed, req.method + " " + req.path +
                                                               ": the request could not be read (" +
                                                               req.read_failure_reason + ")");
    e.http_status = req.read_failure;
    return write_error(ex, e);
  }
  // The routers POST /flush_cache without a body or Content-Length; every
  // other POST needs a length (or a chunked body) to carry its JSON.
  if (req.method == "POST" && req.path != "/flush_cache" && !req.has_header("Content-Length") &&
      req.header("Transfer-Encoding").find("chunked") == std::string::npos) {
    ErrorReply e = error_reply(ProtocolFailure::malformed,
                               req.method + " " + req.path +
                                   ": the request could not be read (a POST needs a Content-Length header)");
    e.http_status = 400;
    return write_error(ex, e);
  }
  try {
    std::string key_name;
    if (!authorized(ex, key_name)) return;
    const auto generation_route = [&](std::string_view path) -> std::optional<GenerationRoute> {
      if (path == "/v1/completions") return GenerationRoute::completions;
      if (path == "/v1/chat/completions") return GenerationRoute::chat;
      if (path == "/generate") return GenerationRoute::generate;
      return std::nullopt;
    };
    constexpr std::string_view poll_prefix = "/v1/poll/";
    const bool polled = req.path.rfind(poll_prefix, 0) == 0;
    if (const auto route = generation_route(req.path)) {
      if (req.websocket_upgrade) return handle_websocket(*route, ex, key_name);
      if (req.method == "POST") return handle_generation(*route, ex, key_name);
    } else if (polled && req.method == "POST") {
      const std::string rest = req.path.substr(poll_prefix.size() - 1);
      if (const auto route = generation_route(rest == "/generate" ? rest : "/v1" + rest))
        return handle_poll_submit(*route, ex, key_name);
    } else if (polled && (req.method == "GET" || req.method == "DELETE")) {
      const std::string id = req.path.substr(poll_prefix.size());
      return req.method == "GET" ? handle_poll_fetch(id, ex, key_name) : handle_poll_delete(id, ex, key_name);
    } else if (req.path == "/v1/embeddings" && req.method == "POST") {
      return handle_embeddings(ex, key_name);
    } else if (req.path == "/flush_cache" && (req.method == "POST" || req.method == "GET")) {
      // GET too, as SGLang's worker does.
      return write_json(ex, 200, sglang_flush_cache(backend));
    } else if (req.method == "GET" && route_info(ex)) {
      return;
    }
    write_error(ex, error_reply(ProtocolFailure::unknown_type, "no route for " + req.method + " " + req.path));
  } catch (const Error& e) {
    write_error(ex, error_reply(e.code(), e.what()));
  } catch (const std::exception& e) {
    write_error(ex, error_reply(ErrorCode::internal, e.what()));
  }
}

HttpServer::HttpServer(Backend& backend, Metrics& metrics, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(backend, metrics, std::move(options))) {
  ::signal(SIGPIPE, SIG_IGN);  // a vanished client must fail a write, not kill the server
  auto [host, port] = split_host_port(impl_->options.address, "server.http");
  host_ = host;
  HttpTransportOptions t;
  t.host = host;
  t.port = port;
  t.max_body_bytes = impl_->options.max_body_bytes;
  t.num_threads = impl_->options.num_threads;
  t.io_timeout = impl_->options.io_timeout;
  t.tls_cert_file = impl_->options.tls_cert_file;
  t.tls_key_file = impl_->options.tls_key_file;
  impl_->transport = std::make_unique<HttpTransport>(t, [impl = impl_.get()](HttpExchange& ex) { impl->handle(ex); });
  port_ = impl_->transport->port();
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
  if (stopped_) return;
  stopped_ = true;
  impl_->draining = true;
  cancel_all();
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (num_live() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->polls->close();
  impl_->transport->stop();
}

}  // namespace llmk::ipc
