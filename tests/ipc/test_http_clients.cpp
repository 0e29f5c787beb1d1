// llmk's own HTTP clients against a server with TLS and API keys: the load
// generator (ipc::run_load) and `llmk bench --backend http`. With the right
// key and CA every request succeeds; a wrong key fails naming the 401, a
// certificate nobody told them to trust fails naming the TLS verification.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "apps/bench/targets.hpp"
#include "core/error.hpp"
#include "ipc/http_server.hpp"
#include "ipc/load_generator.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "self_signed.hpp"
#include "support.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

constexpr const char* kSecret = "sk-client-test-7f3a";

// An HTTPS server over the fake backend that admits one key, kSecret.
struct SecuredServer {
  explicit SecuredServer(const test::SelfSigned& tls)
      : keys_file(tls.dir / "keys.txt"),
        server(backend, metrics,
               {.address = "127.0.0.1:0",
                .auth = write_keys(keys_file),
                .tls_cert_file = tls.cert,
                .tls_key_file = tls.key}) {}
  static AuthOptions write_keys(const std::filesystem::path& path) {
    std::ofstream(path) << "bench:" << kSecret << "\n";
    return parse_auth_options(json{{"keys_file", path.string()}}.dump());
  }
  std::filesystem::path keys_file;
  FakeBackend backend;
  Metrics metrics;
  HttpServer server;
};

std::string first_error(const LoadReport& r) { return r.first_errors.empty() ? "" : r.first_errors[0]; }

// `llmk bench --backend http` with `flags`, its output and exit status.
test::CommandResult run_bench(const std::string& env, const std::string& flags, const std::filesystem::path& json_file) {
  return test::run_command(env + " " LLMK_BINARY_DIR "/bin/llmk bench --backend http " + flags +
                           " --vocab-size 256 -n 6 --input-len 4:12 --output-len 5 --request-rate 500 --seed 3"
                           " --max-concurrency 3 --no-progress --json " + json_file.string() + " 2>&1");
}

}  // namespace

TEST_CASE("The load generator reaches a TLS server with a key, and names a refused key and an untrusted certificate",
          "[http][tls][auth][load]") {
  test::SelfSigned tls;
  if (!tls.available()) LLMK_SKIP("no openssl command to make a certificate with");
  SecuredServer s(tls);
  LoadOptions o;
  o.http_port = s.server.port();
  o.http_tls = true;
  o.ca_file = tls.cert;
  o.api_key = kSecret;
  o.num_requests = 12;
  o.concurrency = 4;
  o.max_tokens = 9;
  o.timeout_s = 60;
  o.prompts = {"alpha", "beta gamma", "z"};
  o.expected_text = [](const std::string& prompt) {
    return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), 9);
  };
  const LoadReport ok = run_load(o);
  INFO(ok.summary() << " first error: " << first_error(ok));
  CHECK(ok.num_ok == 12);
  CHECK(ok.num_token_mismatches == 0);
  CHECK(ok.num_tokens == 12u * 9u);

  LoadOptions wrong_key = o;
  wrong_key.api_key = "sk-not-the-key";
  const LoadReport refused = run_load(wrong_key);
  CHECK(refused.num_ok == 0);
  CHECK(refused.num_errors == 12);
  CHECK_THAT(first_error(refused), Catch::Contains("HTTP 401") && Catch::Contains("API key") &&
                                       !Catch::Contains("sk-not-the-key"));
  LoadOptions no_key = o;
  no_key.api_key.clear();
  CHECK_THAT(first_error(run_load(no_key)), Catch::Contains("HTTP 401") && Catch::Contains("without an API key"));

  LoadOptions untrusted = o;
  untrusted.ca_file.clear();  // the system's store has never heard of this certificate
  const LoadReport unverified = run_load(untrusted);
  CHECK(unverified.num_ok == 0);
  CHECK_THAT(first_error(unverified), Catch::Contains("TLS") && Catch::Contains("failed verification"));
  CHECK(s.backend.stats().num_generated_tokens == 12u * 9u);  // only the accepted requests generated
}

TEST_CASE("llmk bench --backend http reaches a TLS server with a key from --api-key or LLMK_API_KEY, never printing it",
          "[http][tls][auth][bench]") {
  test::SelfSigned tls;
  if (!tls.available()) LLMK_SKIP("no openssl command to make a certificate with");
  SecuredServer s(tls);
  const std::string url = "--url https://127.0.0.1:" + std::to_string(s.server.port());
  const std::filesystem::path json_file = tls.dir / "bench.json";
  const std::string ca = " --ca-file " + tls.cert;

  for (const auto& [env, key_flag] : {std::pair<std::string, std::string>{"", std::string(" --api-key ") + kSecret},
                                      {std::string("LLMK_API_KEY=") + kSecret, ""}}) {
    std::filesystem::remove(json_file);
    const auto r = run_bench(env, url + ca + key_flag, json_file);
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find(kSecret) == std::string::npos);
    std::ifstream in(json_file);
    const json j = json::parse(in);
    CHECK(j["num_ok"] == 6);
    CHECK(j["num_output_tokens"] == 6 * 5);
    CHECK(j["target"] == "https://127.0.0.1:" + std::to_string(s.server.port()));
    CHECK(j.dump().find(kSecret) == std::string::npos);
  }

  const auto wrong = run_bench("LLMK_API_KEY=sk-from-env", url + ca + " --api-key sk-wrong", json_file);
  INFO(wrong.out);
  CHECK(wrong.status != 0);
  CHECK_THAT(wrong.out, Catch::Contains("HTTP 401") && Catch::Contains("API key") && !Catch::Contains("sk-wrong"));

  const auto untrusted = run_bench("", url + " --api-key " + kSecret, json_file);
  INFO(untrusted.out);
  CHECK(untrusted.status != 0);
  CHECK_THAT(untrusted.out, Catch::Contains("TLS") && Catch::Contains("failed verification") &&
                                Catch::Contains("--ca-file"));

  const auto plain_url = run_bench("", "--url 127.0.0.1:" + std::to_string(s.server.port()) + ca, json_file);
  CHECK(plain_url.status != 0);
  CHECK_THAT(plain_url.out, Catch::Contains("--ca-file needs an https:// --url"));
}

TEST_CASE("bench --url takes HOST:PORT, http:// and https://, and names what is wrong with anything else",
          "[http][bench]") {
  const bench::HttpEndpoint plain = bench::parse_http_url("10.0.0.7:8000");
  CHECK(plain.host == "10.0.0.7");
  CHECK(plain.port == 8000);
  CHECK_FALSE(plain.tls);
  CHECK_FALSE(bench::parse_http_url("http://localhost:81/").tls);
  const bench::HttpEndpoint secure = bench::parse_http_url("https://serve.example:443");
  CHECK(secure.tls);
  CHECK(secure.host == "serve.example");
  CHECK(secure.port == 443);
  const bench::HttpEndpoint v6 = bench::parse_http_url("https://[::1]:8443");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 8443);
  const auto error_of = [](const std::string& url) {
    try {
      bench::parse_http_url(url);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("ftp://h:1"), Catch::Contains("--url 'ftp://h:1'") && Catch::Contains("scheme 'ftp'"));
  CHECK_THAT(error_of("localhost"), Catch::Contains("no HOST:PORT"));
  CHECK_THAT(error_of("h:0"), Catch::Contains("port '0'"));
  CHECK_THAT(error_of("h:70000"), Catch::Contains("port '70000'"));
  CHECK_THAT(error_of("h:80x"), Catch::Contains("port '80x'"));
  CHECK_THAT(error_of("https://h:443/v1"), Catch::Contains("has a path"));
  CHECK_THAT(error_of("::1:80"), Catch::Contains("IPv6 host outside brackets"));
}
