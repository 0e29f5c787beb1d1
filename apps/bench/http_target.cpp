// `llmk serve` over its OpenAI-compatible HTTP API with SSE streaming, plain
// or over TLS, with an API key or without. One connection (and thread) per
// request, as independent clients would do.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <mutex>
#include <thread>

#include "apps/bench/targets.hpp"
#include "ipc/http_client_tls.hpp"
#include "core/error.hpp"

namespace llmk::bench {
namespace {

std::string host_port(const HttpEndpoint& e) {
  const bool ipv6 = e.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
}

std::unique_ptr<httplib::Client> make_client(const HttpEndpoint& e) {
  return ipc::open_http_client(e.host, e.port, e.tls, e.ca_file, e.api_key);
}

std::string connection_error(const httplib::Client& cli, httplib::Error error, const HttpEndpoint& e) {
  return ipc::http_connection_error(cli, error, e.host, e.ca_file, "--ca-file");
}

// An answer other than 200. A 401 names the key problem; the server's
// message is kept, the key itself never appears.
std::string status_error(int status, const std::string& body, const HttpEndpoint& e) {
  std::string message = body;
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) message = j["error"].value("message", body);
  if (status == 401) {
    return std::string("HTTP 401: the server refused ") +
           (e.api_key.empty() ? "a request without an API key (give --api-key or LLMK_API_KEY)"
                              : "the API key (--api-key or LLMK_API_KEY)") +
           ": " + message;
  }
  return "HTTP " + std::to_string(status) + ": " + message;
}

FinishReason finish_from(const std::string& s) {
  if (s == "stop") return FinishReason::stop;
  if (s == "length") return FinishReason::length;
  if (s == "cancelled") return FinishReason::cancelled;
  return FinishReason::error;
}

class HttpTarget : public Target {
 public:
  // GET /v1/models checks the connection, the certificate and the key; an
  // empty model name becomes the server's first model.
  HttpTarget(HttpEndpoint endpoint, std::string model) : endpoint_(std::move(endpoint)), model_(std::move(model)) {
    const auto cli = make_client(endpoint_);
    cli->set_connection_timeout(30, 0);
    const auto res = cli->Get("/v1/models");
    if (!res) throw Error(ErrorCode::peer_lost, "bench: " + name() + ": " + connection_error(*cli, res.error(), endpoint_));
    if (res->status == 401) throw Error(ErrorCode::invalid_argument, "bench: " + name() + ": " + status_error(401, res->body, endpoint_));
    if (res->status != 200 || !model_.empty()) return;
    const auto j = nlohmann::json::parse(res->body, nullptr, false);
    if (!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) {
      model_ = j["data"][0].value("id", "");
    }
  }
  ~HttpTarget() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  void submit(Request request, EventCallback on_event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.emplace_back([this, request = std::move(request), on_event = std::move(on_event)] {
      run(request, on_event);
    });
  }
  std::optional<EngineStats> stats() override { return std::nullopt; }
  std::string name() const override { return (endpoint_.tls ? "https://" : "http://") + host_port(endpoint_); }

 private:
  void run(const Request& request, const EventCallback& on_event) {
    nlohmann::json body = {{"model", model_},
                           {"max_tokens", request.sampling.max_tokens},
                           {"temperature", request.sampling.temperature},
                           {"ignore_eos", request.sampling.ignore_eos},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
    if (!request.prompt_token_ids.empty()) body["prompt"] = request.prompt_token_ids;
    else body["prompt"] = request.prompt;
    if (request.sampling.seed) body["seed"] = *request.sampling.seed;

    RequestEvent final_event;
    final_event.request_id = request.id;
    final_event.finished = true;
    final_event.request_done = true;
    bool finished = false;
    std::string buffer;
    // Each SSE "data:" line is a JSON chunk; a chunk with a choice is one
    // engine event (one token); the usage chunk closes the request.
    auto on_line = [&](const std::string& line) {
      if (line.rfind("data: ", 0) != 0) return;
      const std::string data = line.substr(6);
      if (data == "[DONE]") return;
      nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
      if (j.is_discarded()) return;
      if (j.contains("error")) {
        final_event.finish_reason = FinishReason::error;
        final_event.error = j["error"].dump();
        return;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        final_event.usage.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        final_event.usage.completion_tokens = j["usage"].value("completion_tokens", 0);
      }
      for (const auto& c : j.value("choices", nlohmann::json::array())) {
        RequestEvent ev;
        ev.request_id = request.id;
        ev.text_delta = c.value("text", "");
        const bool last = c.contains("finish_reason") && c["finish_reason"].is_string();
        if (!ev.text_delta.empty() || !last) ev.token_ids.push_back(-1);  // id unknown over HTTP
        if (last) {
          final_event.finish_reason = finish_from(c["finish_reason"].get<std::string>());
          finished = true;
        }
        if (!ev.token_ids.empty()) on_event(ev);
      }
    };
    const auto cli = make_client(endpoint_);
    cli->set_read_timeout(600, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data, n);
        return true;
      }
      buffer.append(data, n);
      for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
        std::string line = buffer.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        buffer.erase(0, nl + 1);
        on_line(line);
      }
      return true;
    };
    auto res = cli->send(req);
    if (!res) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = connection_error(*cli, res.error(), endpoint_);
    } else if (status != 200) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = status_error(status, error_body, endpoint_);
    } else if (!finished && final_event.finish_reason != FinishReason::error) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = "stream ended without finish_reason";
    }
    on_event(final_event);
  }

  HttpEndpoint endpoint_;
  std::string model_;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

}  // namespace

HttpEndpoint parse_http_url(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, "bench: --url '" + url + "' " + why +
                                                  " (expected HOST:PORT, http://HOST:PORT or https://HOST:PORT)");
  };
  HttpEndpoint e;
  std::string rest = url;
  if (const size_t scheme_end = rest.find("://"); scheme_end != std::string::npos) {
    const std::string scheme = rest.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https") throw bad("has scheme '" + scheme + "'");
    e.tls = scheme == "https";
    rest.erase(0, scheme_end + 3);
  }
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) throw bad("has a path");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("has no HOST:PORT");
  e.host = rest.substr(0, colon);
  if (e.host.front() == '[') {
    if (e.host.size() < 3 || e.host.back() != ']') throw bad("has an unclosed IPv6 host");
    e.host = e.host.substr(1, e.host.size() - 2);
  } else if (e.host.find(':') != std::string::npos) {
    throw bad("has an IPv6 host outside brackets");
  }
  const std::string port = rest.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || e.port < 1 || e.port > 65535) {
    throw bad("has port '" + port + "' (1 to 65535)");
  }
  return e;
}

std::unique_ptr<Target> make_http_target(const HttpEndpoint& endpoint, const std::string& model) {
  return std::make_unique<HttpTarget>(endpoint, model);
}

}  // namespace llmk::bench
