#include "ipc/load_generator.hpp"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "ipc/client.hpp"
#include "ipc/http_client_tls.hpp"

namespace llmk::ipc {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t0, Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); }

// One request's outcome as the client saw it.
struct Outcome {
  bool ok = false;
  std::string error;
  std::string text;
  uint64_t num_streamed_tokens = 0;
  int32_t num_usage_tokens = -1;
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> gaps_s;
};

// The worker's connection (ipc/http_client_tls.hpp), kept alive between requests.
std::unique_ptr<httplib::Client> make_http_client(const LoadOptions& o) {
  auto http = open_http_client(o.http_host, o.http_port, o.http_tls, o.ca_file, o.api_key);
  http->set_read_timeout(static_cast<time_t>(o.timeout_s), 0);
  http->set_keep_alive(true);
  http->set_tcp_nodelay(true);
  return http;
}

std::string connection_error(const httplib::Client& http, httplib::Error e, const LoadOptions& o) {
  return http_connection_error(http, e, o.http_host, o.ca_file, "ca_file");
}

// An answer other than 200. A 401 names the key problem; the server's
// message is kept, the key itself never appears.
std::string status_error(int status, const std::string& body, const LoadOptions& o) {
  std::string message = body;
  const json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) message = j["error"].value("message", body);
  if (status == 401) {
    return std::string("HTTP 401: the server refused ") +
           (o.api_key.empty() ? "a request without an API key (api_key is empty)" : "the API key (api_key)") + ": " +
           message;
  }
  return "HTTP " + std::to_string(status) + ": " + message;
}

Outcome http_request(httplib::Client& http, const LoadOptions& o, const std::string& prompt) {
  Outcome out;
  const json body = {{"prompt", prompt},   {"max_tokens", o.max_tokens}, {"temperature", 0},
                     {"ignore_eos", o.ignore_eos}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  bool done = false;
  const auto t0 = Clock::now();
  auto last = t0;
  int status = 0;
  std::string error_body;  // the answer when it is not a stream
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, len);
      return true;
    }
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // a keepalive comment
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const json chunk = json::parse(payload, nullptr, false);
      if (chunk.contains("error")) {
        out.error = chunk["error"].value("message", "error");
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        out.num_usage_tokens = chunk["usage"].value("completion_tokens", -1);
      }
      for (const auto& c : chunk.value("choices", json::array())) {
        out.text += c.value("text", "");
        const auto now = Clock::now();
        if (out.num_streamed_tokens == 0) {
          out.ttft_s = since(t0, now);
        } else {
          out.gaps_s.push_back(since(last, now));
        }
        last = now;
        ++out.num_streamed_tokens;  // one chunk per engine event, one token each
      }
    }
    return true;
  };
  const auto res = http.send(req);
  out.e2e_s = since(t0, Clock::now());
  if (!res) {
    out.error = connection_error(http, res.error(), o);
  } else if (res->status != 200) {
    out.error = status_error(res->status, error_body, o);
  } else if (!done && out.error.empty()) {
    out.error = "the stream ended without [DONE]";
  }
  out.ok = out.error.empty();
  return out;
}

Outcome zmq_request(Client& client, const LoadOptions& o, const std::string& prompt, const std::string& id) {
  Outcome out;
  Request r;
  r.id = id;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = o.max_tokens;
  r.sampling.ignore_eos = o.ignore_eos;
  const auto t0 = Clock::now();
  auto last = t0;
  auto events = client.submit(r, true);
  for (;;) {
    auto ev = events->next(std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
    if (!ev) {
      out.error = "request " + id + " timed out";
      client.cancel(id);
      break;
    }
    if (ev->finish_reason == FinishReason::error) {
      out.error = ev->error;
      break;
    }
    const auto now = Clock::now();
    for (size_t k = 0; k < ev->token_ids.size(); ++k) {
      if (out.num_streamed_tokens == 0) {
        out.ttft_s = since(t0, now);
      } else {
        out.gaps_s.push_back(since(last, now));
      }
      last = now;
      ++out.num_streamed_tokens;
    }
    out.text += ev->text_delta;
    if (ev->finished) out.num_usage_tokens = ev->usage.completion_tokens;
    if (ev->request_done) {
      out.ok = true;
      break;
    }
  }
  out.e2e_s = since(t0, Clock::now());
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

std::string LoadReport::summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%d ok, %d errors, %d token mismatches; %llu tokens in %.2f s = %.0f tok/s, %.1f req/s; "
                "TTFT p50 %.1f ms p99 %.1f ms; ITL p50 %.2f ms p99 %.2f ms; e2e p50 %.0f ms p99 %.0f ms",
                num_ok, num_errors, num_token_mismatches, static_cast<unsigned long long>(num_tokens), wall_s,
                tokens_per_s(), requests_per_s(), ttft_p50_s * 1e3, ttft_p99_s * 1e3, itl_p50_s * 1e3,
                itl_p99_s * 1e3, e2e_p50_s * 1e3, e2e_p99_s * 1e3);
  return buf;
}

LoadReport run_load(const LoadOptions& o) {
  std::vector<Outcome> outcomes(static_cast<size_t>(std::max(0, o.num_requests)));
  std::atomic<int32_t> next{0};
  std::unique_ptr<Client> client;
  if (o.protocol == "zmq") client = std::make_unique<Client>(o.zmq_endpoint);
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < std::max(1, o.concurrency); ++w) {
    workers.emplace_back([&] {
      std::unique_ptr<httplib::Client> http;
      if (o.protocol != "zmq") http = make_http_client(o);
      for (int32_t i; (i = next.fetch_add(1)) < o.num_requests;) {
        const std::string& prompt = o.prompts[static_cast<size_t>(i) % o.prompts.size()];
        Outcome out = http ? http_request(*http, o, prompt) : zmq_request(*client, o, prompt, "load-" + std::to_string(i));
        outcomes[static_cast<size_t>(i)] = std::move(out);
      }
    });
  }
  for (auto& t : workers) t.join();
  LoadReport report;
  report.wall_s = since(t0, Clock::now());
  std::vector<double> ttft, itl, e2e;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& out = outcomes[i];
    if (!out.ok) {
      ++report.num_errors;
      if (report.first_errors.size() < 5) report.first_errors.push_back(out.error);
      continue;
    }
    ++report.num_ok;
    report.num_tokens += out.num_streamed_tokens;
    const std::string& prompt = o.prompts[i % o.prompts.size()];
    if (static_cast<int64_t>(out.num_streamed_tokens) != out.num_usage_tokens ||
        (o.expected_text && out.text != o.expected_text(prompt))) {
      ++report.num_token_mismatches;
    }
    ttft.push_back(out.ttft_s);
    e2e.push_back(out.e2e_s);
    itl.insert(itl.end(), out.gaps_s.begin(), out.gaps_s.end());
  }
  report.ttft_p50_s = percentile(ttft, 0.5);
  report.ttft_p99_s = percentile(ttft, 0.99);
  report.itl_p50_s = percentile(itl, 0.5);
  report.itl_p99_s = percentile(itl, 0.99);
  report.e2e_p50_s = percentile(e2e, 0.5);
  report.e2e_p99_s = percentile(e2e, 0.99);
  return report;
}

}  // namespace llmk::ipc
