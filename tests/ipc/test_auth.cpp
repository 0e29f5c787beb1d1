// API keys, per-key limits, overload and deadlines on the HTTP front end
// (ipc/access.hpp), over the fake backend, driven by curl and the openai SDK.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>

#include "core/error.hpp"
#include "ipc/access.hpp"
#include "ipc/http_server.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "support.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::curl;
using llmk::test::eventually;
using nlohmann::json;

namespace {

// A file removed at the end of the test.
struct TempFile {
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("llmk_auth_" + std::to_string(::getpid()) + "_" + std::to_string(++counter) + ".txt");
    write(text);
  }
  ~TempFile() { std::filesystem::remove(path); }
  void write(const std::string& text) const { std::ofstream(path) << text; }
  std::filesystem::path path;
};

std::string bearer(const std::string& secret) { return "-H " + test::shell_quote("Authorization: Bearer " + secret); }

std::string expected(const std::string& prompt, int32_t n) {
  return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), n);
}

AuthOptions keys_from(const TempFile& file, const std::string& limits_json = "{}") {
  return parse_auth_options(json{{"keys_file", file.path.string()}, {"limits", json::parse(limits_json)}}.dump());
}

}  // namespace

TEST_CASE("constant_time_equal compares whole strings of any length", "[auth]") {
  CHECK(constant_time_equal("sk-secret", "sk-secret"));
  CHECK_FALSE(constant_time_equal("sk-secret", "sk-secreT"));
  CHECK_FALSE(constant_time_equal("sk-secret", "sk-secret2"));
  CHECK_FALSE(constant_time_equal("sk-secret", ""));
  CHECK(constant_time_equal("", ""));
  CHECK_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST_CASE("Key entries and server.auth are read strictly, errors naming the place and never the secret", "[auth]") {
  const auto entries = parse_key_entries("# team keys\nalice: sk-a\n\nbob:sk-b:with-colon\n", "keys.txt", "\n", "");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0] == std::pair<std::string, std::string>{"alice", "sk-a"});
  CHECK(entries[1] == std::pair<std::string, std::string>{"bob", "sk-b:with-colon"});
  CHECK(parse_key_entries("just-a-secret", "LLMK_KEYS", ",", "env").at(0).first == "env");
  const auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string no_colon = error_of([] { parse_key_entries("alice:sk-a\nsk-lonely\n", "keys.txt", "\n", ""); });
  CHECK(no_colon.find("keys.txt entry 2") != std::string::npos);
  CHECK(no_colon.find("sk-lonely") == std::string::npos);
  CHECK(error_of([] { parse_key_entries("a:1\na:2", "k", "\n", ""); }).find("twice") != std::string::npos);
  CHECK(error_of([] { parse_auth_options(R"({"keyfile": "x"})"); }).find("server.auth.keyfile") != std::string::npos);
  CHECK(error_of([] { parse_auth_options(R"({"limits": {"alice": {"max_concurrent": -1}}})"); })
            .find("server.auth.limits.alice.max_concurrent") != std::string::npos);
  CHECK(error_of([] { parse_auth_options(R"({"open_routes": ["health"]})"); }).find("server.auth.open_routes") !=
        std::string::npos);
  const AuthOptions o = parse_auth_options(
      R"({"open_routes": ["/health", "/metrics"], "limits": {"default": {"max_concurrent": 2}, "alice": {"tokens_per_minute": 50}}})");
  CHECK(o.open_routes == std::vector<std::string>{"/health", "/metrics"});
  CHECK(o.limits_of("bob").max_concurrent == 2);
  CHECK(o.limits_of("alice").max_concurrent == 0);
  CHECK(o.limits_of("alice").tokens_per_minute == 50);
  CHECK(presented_secret("Bearer sk-a", "") == "sk-a");
  CHECK(presented_secret("bearer  sk-a ", "") == "sk-a");
  CHECK(presented_secret("", "sk-x") == "sk-x");
  CHECK(presented_secret("Basic abc", "") == "");
}

TEST_CASE("Without a valid key a request gets 401 and nothing is generated, and a revoked key is refused", "[auth]") {
  TempFile keys("alice:sk-alice-1\nbob:sk-bob-2\n");
  FakeBackend backend;
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = keys_from(keys)});
  const int port = server.port();
  const std::string body = json{{"prompt", "Hello"}, {"max_tokens", 7}}.dump();
  for (const std::string& args : {std::string(""), bearer("sk-wrong"), bearer("sk-alice-1x"), bearer("sk-alice-"),
                                  std::string("-H 'x-api-key: sk-nope'")}) {
    INFO(args);
    const auto r = curl(port, "POST", "/v1/completions", body, args);
    CHECK(r.status == 401);
    CHECK(r.json()["error"]["code"] == "invalid_api_key");
    CHECK(r.json()["error"]["type"] == "invalid_request_error");
    CHECK(r.json()["error"]["message"].is_string());
  }
  CHECK(curl(port, "POST", "/generate", R"({"text": "Hello"})").status == 401);
  CHECK(curl(port, "POST", "/flush_cache", "").status == 401);
  CHECK(curl(port, "GET", "/v1/models").status == 401);
  CHECK(curl(port, "GET", "/metrics").status == 401);  // only /health is open by default
  CHECK(curl(port, "GET", "/health").status == 200);
  CHECK(backend.stats().num_generated_tokens == 0);

  // The right key, as a bearer token or x-api-key, is served.
  const auto alice = curl(port, "POST", "/v1/completions", body, bearer("sk-alice-1"));
  REQUIRE(alice.status == 200);
  CHECK(alice.json()["choices"][0]["text"] == expected("Hello", 7));
  CHECK(curl(port, "POST", "/v1/completions", body, "-H 'x-api-key: sk-bob-2'").status == 200);
  const auto generated = backend.stats().num_generated_tokens;
  CHECK(generated == 14);

  // Bob's key leaves the file: refused from the next request on.
  keys.write("alice:sk-alice-1\n");
  const auto revoked = curl(port, "POST", "/v1/completions", body, bearer("sk-bob-2"));
  CHECK(revoked.status == 401);
  CHECK(backend.stats().num_generated_tokens == generated);
  CHECK(curl(port, "POST", "/v1/completions", body, bearer("sk-alice-1")).status == 200);

  // The metrics count the refusals and never show a secret.
  const auto m = curl(port, "GET", "/metrics", "", bearer("sk-alice-1"));
  REQUIRE(m.status == 200);
  CHECK(m.body.find("llmk_requests_rejected_total{frontend=\"http\",code=\"invalid_api_key\"} 10") !=
        std::string::npos);
  CHECK(m.body.find("llmk_requests_total{frontend=\"http\",finish_reason=\"length\"} 3") != std::string::npos);
  CHECK(m.body.find("sk-") == std::string::npos);
}

TEST_CASE("Open routes are served without a key as configured", "[auth]") {
  TempFile keys("alice:sk-alice-1\n");
  FakeBackend backend;
  Metrics metrics;
  AuthOptions auth = keys_from(keys);
  auth.open_routes = {"/health", "/metrics"};
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = auth});
  CHECK(curl(server.port(), "GET", "/metrics").status == 200);
  CHECK(curl(server.port(), "GET", "/v1/models").status == 401);
}

TEST_CASE("A missing keys file or environment variable stops the server naming the key", "[auth]") {
  FakeBackend backend;
  Metrics metrics;
  const auto start = [&](const std::string& auth_json) {
    try {
      HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = parse_auth_options(auth_json)});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("started");
  };
  CHECK(start(R"({"keys_file": "/nonexistent/keys.txt"})").find("server.auth.keys_file") != std::string::npos);
  ::unsetenv("LLMK_TEST_UNSET_KEYS");
  CHECK(start(R"({"keys_env": "LLMK_TEST_UNSET_KEYS"})").find("LLMK_TEST_UNSET_KEYS") != std::string::npos);
  ::setenv("LLMK_TEST_KEYS", "ci:sk-ci-9,dev:sk-dev-3", 1);
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0",
                                       .auth = parse_auth_options(R"({"keys_env": "LLMK_TEST_KEYS"})")});
  CHECK(curl(server.port(), "GET", "/v1/models", "", bearer("sk-dev-3")).status == 200);
  CHECK(curl(server.port(), "GET", "/v1/models", "", bearer("sk-ci-8")).status == 401);
}

TEST_CASE("The openai SDK is served with its api_key and raises AuthenticationError with a wrong one", "[auth]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  TempFile keys("sdk:sk-sdk-123\n");
  FakeBackend backend;
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .auth = keys_from(keys)});
  const auto r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() +
                                   " " LLMK_SOURCE_DIR "/tests/ipc/openai_auth_client.py " +
                                   std::to_string(server.port()) + " sk-sdk-123 sk-wrong 'Once upon' 9");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json out = json::parse(r.out);
  CHECK(out["text"] == expected("Once upon", 9));
  CHECK(out["streamed"] == expected("Once upon", 9));
  CHECK(out["bad_key"] == "AuthenticationError");
  CHECK(out["bad_key_status"] == 401);
  CHECK(out["bad_key_code"] == "invalid_api_key");
}
