// `llmk serve` over its OpenAI-compatible HTTP API with SSE streaming. One
// connection (and thread) per request, as independent clients would do.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <mutex>
#include <thread>

#include "apps/bench/targets.hpp"

namespace llmk::bench {
namespace {

FinishReason finish_from(const std::string& s) {
  if (s == "stop") return FinishReason::stop;
  if (s == "length") return FinishReason::length;
  if (s == "cancelled") return FinishReason::cancelled;
  return FinishReason::error;
}

class HttpTarget : public Target {
 public:
  // An empty model name is asked of the server (GET /v1/models, the first).
  HttpTarget(std::string host, int port, std::string model) : host_(std::move(host)), port_(port), model_(std::move(model)) {
    if (!model_.empty()) return;
    httplib::Client cli(host_, port_);
    if (auto res = cli.Get("/v1/models"); res && res->status == 200) {
      const auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) {
        model_ = j["data"][0].value("id", "");
      }
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
  std::string name() const override { return "http " + host_ + ":" + std::to_string(port_); }

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
    httplib::Client cli(host_, port_);
    cli.set_read_timeout(600, 0);
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
    auto res = cli.send(req);
    if (!res) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = "HTTP request failed: " + httplib::to_string(res.error());
    } else if (status != 200) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = "HTTP " + std::to_string(status) + ": " + error_body;
    } else if (!finished && final_event.finish_reason != FinishReason::error) {
      final_event.finish_reason = FinishReason::error;
      final_event.error = "stream ended without finish_reason";
    }
    on_event(final_event);
  }

  std::string host_;
  int port_;
  std::string model_;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Target> make_http_target(const std::string& host, int port, const std::string& model) {
  return std::make_unique<HttpTarget>(host, port, model);
}

}  // namespace llmk::bench
