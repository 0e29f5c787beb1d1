// `llmk serve` as a process on the real engine (llama-110m dummy weights:
// slow enough per token that a deadline lands mid-generation): API keys and
// deadlines from the config, and the KV a cancelled request held given back.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "serve_process.hpp"
#include "support.hpp"

using namespace llmk;
using llmk::test::curl;
using llmk::test::eventually;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

// A sample's value in a Prometheus text exposition (-1 when absent).
double metric(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const char next = pos + name.size() < text.size() ? text[pos + name.size()] : '\0';
    if (line_start && (next == '{' || next == ' ')) {
      const size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += name.size();
  }
  return -1;
}

}  // namespace

TEST_CASE("llmk serve refuses requests without a key and cancels one past its deadline, freeing its KV",
          "[serve][security]") {
  const auto keys = std::filesystem::temp_directory_path() / ("llmk_serve_keys_" + std::to_string(::getpid()));
  std::ofstream(keys) << "ops:sk-ops-77\n";
  ServeProcess serve({"--set", "model.load_format=dummy", "--set", "model.preset=llama-110m", "--set",
                      "server.auth={\"keys_file\": \"" + keys.string() + "\"}", "--set",
                      "server.request_timeout_s=0.5"});
  REQUIRE(serve.wait_ready());
  const int port = serve.http_port();
  const std::string key = "-H 'Authorization: Bearer sk-ops-77'";
  const auto metrics = [&] { return curl(port, "GET", "/metrics", "", key).body; };
  INFO(serve.log());
  const double idle_slots = metric(metrics(), "llmk_kv_cache_used_slots");
  REQUIRE(idle_slots == 0);

  const json long_request = {{"prompt", "Once upon a time"}, {"max_tokens", 900}, {"ignore_eos", true}};
  CHECK(curl(port, "POST", "/v1/completions", long_request.dump()).status == 401);
  CHECK(curl(port, "GET", "/metrics").status == 401);

  // About 16 ms a token on one core: 900 tokens would take seconds.
  const auto r = curl(port, "POST", "/v1/completions", long_request.dump(), key);
  CHECK(r.status == 504);
  CHECK(r.json()["error"]["code"] == "deadline_exceeded");
  CHECK(eventually(
      [&] {
        const std::string m = metrics();
        return metric(m, "llmk_kv_cache_used_slots") == idle_slots && metric(m, "llmk_num_requests_running") == 0;
      },
      std::chrono::seconds(10)));

  // A request's own longer timeout lets a short completion finish.
  const auto quick = curl(port, "POST", "/v1/completions",
                          json{{"prompt", "Once"}, {"max_tokens", 4}, {"timeout", 30}}.dump(), key);
  CHECK(quick.status == 200);
  CHECK(quick.json()["usage"]["completion_tokens"] == 4);
  const std::string m = metrics();
  CHECK(m.find("llmk_requests_total{frontend=\"http\",finish_reason=\"error\"") != std::string::npos);
  CHECK(m.find("sk-ops") == std::string::npos);
  std::filesystem::remove(keys);
}

TEST_CASE("llmk serve refuses a bad server.auth before loading the model, naming the key", "[serve][security]") {
  for (const auto& [value, named] : {std::pair<std::string, std::string>{R"({"keyfile": "k.txt"})", "server.auth.keyfile"},
                                     {R"({"limits": {"bob": {"max_concurrent": "4"}}})",
                                      "server.auth.limits.bob.max_concurrent"},
                                     {R"({"keys_file": "/nonexistent/keys.txt"})", "server.auth.keys_file"}}) {
    const auto r = test::run_command(LLMK_BINARY_DIR "/bin/llmk serve --model " LLMK_SHARED_DIR
                                     "/models/stories260K --zmq '' --http 127.0.0.1:" +
                                     std::to_string(test::free_port()) + " --set " +
                                     test::shell_quote("server.auth=" + value) + " 2>&1");
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(named) != std::string::npos);
  }
}

TEST_CASE("llmk serve cancels a non-streaming request whose client hangs up, and the engine frees its KV",
          "[serve][security]") {
  ServeProcess serve({"--set", "model.load_format=dummy", "--set", "model.preset=llama-110m"});
  REQUIRE(serve.wait_ready());
  const int port = serve.http_port();
  const auto metrics = [&] { return curl(port, "GET", "/metrics").body; };
  INFO(serve.log());
  REQUIRE(metric(metrics(), "llmk_kv_cache_used_slots") == 0);
  // About 16 ms a token on one core: 900 tokens take seconds; curl gives up
  // (closes its socket) after one, with nothing answered yet.
  const json long_request = {{"prompt", "Once upon a time"}, {"max_tokens", 900}, {"ignore_eos", true}};
  const auto r = curl(port, "POST", "/v1/completions", long_request.dump(), "--max-time 1");
  CHECK(r.status == 0);
  CHECK(eventually(
      [&] {
        const std::string m = metrics();
        return metric(m, "llmk_kv_cache_used_slots") == 0 && metric(m, "llmk_num_requests_running") == 0;
      },
      std::chrono::seconds(30)));
  // It was cancelled, not run to its end: far fewer than 900 tokens, and
  // no more come.
  const double generated = metric(metrics(), "llmk_generation_tokens_total");
  CHECK(generated < 900);
  CHECK(metric(metrics(), "llmk_generation_tokens_total") == generated);
}

TEST_CASE("llmk serve refuses a bad server.tls before loading the model, naming the key and the file",
          "[serve][security]") {
  for (const auto& [value, named] :
       {std::pair<std::string, std::string>{R"({"cert_file": "/nonexistent/server.pem", "key_file": "/nonexistent/k"})",
                                            "/nonexistent/server.pem"},
        {R"({"certfile": "x"})", "server.tls.certfile"}}) {
    const auto r = test::run_command(LLMK_BINARY_DIR "/bin/llmk serve --model " LLMK_SHARED_DIR
                                     "/models/stories260K --zmq '' --http 127.0.0.1:" +
                                     std::to_string(test::free_port()) + " --set " +
                                     test::shell_quote("server.tls=" + value) + " 2>&1");
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(named) != std::string::npos);
  }
}

#endif  // LLMK_HAVE_ENGINE
