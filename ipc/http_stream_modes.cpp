// The generation routes' other response modes: a WebSocket stream and
// polling (docs/protocol.md). Both carry exactly the payloads of the SSE
// stream (HttpServer::Impl::stream_step).
#include <spdlog/spdlog.h>

#include <charconv>
#include <cmath>

#include "ipc/http_server_impl.hpp"
#include "ipc/zmq_protocol.hpp"  // dump_json

namespace llmk::ipc {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// ?from=N&wait=S: the index to fetch from and how long to wait (seconds,
// fractions allowed, cut to `max_wait`); a bad value is a ParamError naming it.
std::pair<size_t, std::chrono::milliseconds> poll_params(const HttpRequest& req, std::chrono::milliseconds max_wait) {
  size_t from = 0;
  if (const auto text = req.query_param("from")) {
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), from);
    if (ec != std::errc() || end != text->data() + text->size())
      throw ParamError("from", "from = '" + *text + "' is not a payload index (a whole number >= 0)");
  }
  double wait_s = 0;
  if (const auto text = req.query_param("wait")) {
    char* end = nullptr;
    wait_s = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(wait_s) || wait_s < 0)
      throw ParamError("wait", "wait = '" + *text + "' is not a number of seconds >= 0");
  }
  const double max_wait_s = std::chrono::duration<double>(max_wait).count();
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(std::min(wait_s, max_wait_s) * 1000));
  return {from, std::min(wait, max_wait)};
}

}  // namespace

// An upgrade GET on a generation route: the client sends the route's JSON
// body as one text message; each SSE payload comes back as one text
// message, then "[DONE]" and a normal close. A refusal is one error message
// and the close. The client closing its connection (or vanishing: a ping
// that cannot be written) cancels the request; frames it sends after the
// body are not read.
void HttpServer::Impl::handle_websocket(GenerationRoute route, HttpExchange& ex, const std::string& key_name) {
  if (draining) return reject(ex, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
  if (!ex.accept_websocket()) return;
  const auto body = ex.ws_read(std::chrono::milliseconds(30000));
  if (!body) return ex.ws_close();
  const auto refuse = [&](const ErrorReply& error) {
    metrics.on_rejected(Frontend::http, error.code);
    ex.ws_write(dump_json(to_openai_json(error)));
    ex.ws_close();
  };
  Generation g;
  try {
    g = parse_generation(route, *body);
  } catch (const std::exception& e) {
    return refuse(error_reply(e));
  }
  g.stream = true;
  auto admitted = access.admit(key_name, *body);
  if (auto* error = std::get_if<ErrorReply>(&admitted)) {
    ex.ws_write(dump_json(to_openai_json(*error)));
    return ex.ws_close();
  }
  g.request.id = g.id;
  auto pending = submit(std::move(g.request), std::get<HttpAccess::Ticket>(admitted));
  const auto gone = [&] {
    spdlog::debug("http: WebSocket client of {} went away, cancelling it", g.id);
    backend.cancel(g.id);
  };
  for (;;) {
    const auto wake = ex.wait(pending->fd(), options.keepalive_interval);
    if (wake == HttpExchange::Wake::hung_up) return gone();
    const auto events = pending->take();
    if (events.empty()) {
      if (wake == HttpExchange::Wake::timeout && !ex.ws_ping()) return gone();
      continue;
    }
    const StreamStep step = stream_step(events, g);
    if (step.cancel) backend.cancel(g.id);
    for (const auto& p : step.payloads)
      if (!ex.ws_write(p)) return step.done ? void() : gone();
    if (step.done) {
      ex.ws_write("[DONE]");
      return ex.ws_close();
    }
  }
}

// POST /v1/poll/<route>: submits and answers 202 {"id", "object":
// "poll.request"} once the first event is in (or first_event_wait passed),
// so an early refusal still gets its own status.
void HttpServer::Impl::handle_poll_submit(GenerationRoute route, HttpExchange& ex, const std::string& key_name) {
  if (draining) return reject(ex, error_reply(ProtocolFailure::shutting_down, "the server is shutting down"));
  expire_polls();
  Generation parsed;
  try {
    parsed = parse_generation(route, ex.request().body);
  } catch (const std::exception& e) {
    return reject(ex, error_reply(e));
  }
  const auto ticket = admit(ex, key_name, ex.request().body);
  if (!ticket) return;
  auto g = std::make_shared<Generation>(std::move(parsed));
  g->stream = true;
  const std::string id = g->id;
  Request request = std::move(g->request);
  request.id = id;
  polls->add(id, key_name);
  // Backend threads feed the store (no calls back into the backend from its
  // own callback: after an error that is not the request's last event, the
  // store ignores the rest).
  auto mutex = std::make_shared<std::mutex>();
  submit_to(std::move(request), *ticket, [this, g, mutex, store = polls](const RequestEvent& ev) {
    std::lock_guard lock(*mutex);
    StreamStep step = stream_step({ev}, *g);
    std::optional<ErrorReply> error;
    if (ev.finish_reason == FinishReason::error) error = error_reply(ev.error_code, ev.error, ev.error_field);
    store->append(g->id, std::move(step.payloads), step.done, error);
  });
  const auto first = polls->fetch(id, key_name, 0, options.first_event_wait);
  if (first && first->first_error) {
    polls->erase(id, key_name);
    backend.cancel(id);
    metrics.on_rejected(Frontend::http, first->first_error->code);
    return write_error(ex, *first->first_error);
  }
  write_json(ex, 202, {{"id", id}, {"object", "poll.request"}, {"url", "/v1/poll/" + id}});
}

// GET /v1/poll/{id}?from=N&wait=S: {"id", "object": "poll.events", "events":
// [payloads from N on], "next": the index to ask for next, "done"}.
void HttpServer::Impl::handle_poll_fetch(const std::string& id, HttpExchange& ex, const std::string& key_name) {
  expire_polls();
  std::pair<size_t, std::chrono::milliseconds> params;
  try {
    params = poll_params(ex.request(), options.poll.max_wait);
  } catch (const std::exception& e) {
    return write_error(ex, error_reply(e));
  }
  const auto batch = polls->fetch(id, key_name, params.first, params.second);
  if (!batch) {
    return write_error(ex, error_reply(ErrorCode::not_found, "no polled request '" + id +
                                                                 "' (unknown, or its result expired)",
                                       "id"));
  }
  std::string events = "[";
  for (size_t i = 0; i < batch->payloads.size(); ++i) events += (i ? "," : "") + batch->payloads[i];
  events += "]";
  const std::string body = "{\"id\":" + json(id).dump() + ",\"object\":\"poll.events\",\"events\":" + events +
                           ",\"next\":" + std::to_string(batch->next) + ",\"done\":" + (batch->done ? "true" : "false") +
                           "}";
  ex.respond(200, "application/json", body);
}

// DELETE /v1/poll/{id}: cancels the request if it is live and forgets it.
void HttpServer::Impl::handle_poll_delete(const std::string& id, HttpExchange& ex, const std::string& key_name) {
  const auto erased = polls->erase(id, key_name);
  if (!erased.found) {
    return write_error(ex, error_reply(ErrorCode::not_found, "no polled request '" + id +
                                                                 "' (unknown, or its result expired)",
                                       "id"));
  }
  if (erased.live) backend.cancel(id);
  write_json(ex, 200, {{"id", id}, {"object", "poll.request"}, {"deleted", true}});
}

void HttpServer::Impl::expire_polls() {
  for (const auto& abandoned : polls->expire(Clock::now())) {
    spdlog::debug("http: polled request {} was not fetched for {} ms, cancelling it", abandoned,
                  options.poll.keep.count());
    backend.cancel(abandoned);
  }
}

}  // namespace llmk::ipc
