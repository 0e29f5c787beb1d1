// HTTPS on the HTTP front end (server.tls): a self-signed certificate made
// here with the openssl command, the openai SDK trusting it, plain HTTP on
// the TLS port refused while the server goes on serving, and start-up errors
// that name the file at fault.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "ipc/http_server.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "self_signed.hpp"
#include "support.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

using test::SelfSigned;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// curl over https trusting `cert`; returns the HTTP status (0 when no answer).
int https_status(int port, const std::string& cert, const std::string& path) {
  return std::atoi(test::run_command("curl -s -o /dev/null -w '%{http_code}' --max-time 30 --cacert " + cert +
                                     " https://127.0.0.1:" + std::to_string(port) + path)
                       .out.c_str());
}

}  // namespace

TEST_CASE("The openai SDK trusting a self-signed certificate completes over TLS, streamed or not", "[http][tls]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  SelfSigned tls;
  if (!tls.available()) LLMK_SKIP("no openssl command to make a certificate with");
  FakeBackend backend;
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .tls_cert_file = tls.cert, .tls_key_file = tls.key});
  const auto r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() +
                                   " " LLMK_SOURCE_DIR "/tests/ipc/openai_tls_client.py " +
                                   std::to_string(server.port()) + " " + tls.cert + " 'Once upon' 11");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json out = json::parse(r.out);
  const std::string expected = FakeBackend::expected_text(FakeBackend::tokenize("Once upon", true), 11);
  CHECK(out["text"] == expected);
  CHECK(out["streamed"] == expected);
  CHECK(out["untrusted"] == "APIConnectionError");
}

TEST_CASE("Plain HTTP against the TLS port gets no answer and the server goes on serving", "[http][tls]") {
  SelfSigned tls;
  if (!tls.available()) LLMK_SKIP("no openssl command to make a certificate with");
  FakeBackend backend;
  Metrics metrics;
  HttpServer server(backend, metrics, {.address = "127.0.0.1:0", .tls_cert_file = tls.cert, .tls_key_file = tls.key});
  REQUIRE(https_status(server.port(), tls.cert, "/health") == 200);
  for (int i = 0; i < 3; ++i) {
    const auto plain = test::curl(server.port(), "GET", "/health");
    CHECK(plain.status == 0);  // no HTTP answer on a TLS port
  }
  CHECK(https_status(server.port(), tls.cert, "/health") == 200);
  CHECK(https_status(server.port(), tls.cert, "/v1/models") == 200);
}

TEST_CASE("TLS files that are missing, unreadable or not PEM fail at start naming the file", "[http][tls]") {
  SelfSigned tls;
  if (!tls.available()) LLMK_SKIP("no openssl command to make a certificate with");
  FakeBackend backend;
  Metrics metrics;
  const auto start = [&](const std::string& cert, const std::string& key) {
    return error_of([&] { HttpServer s(backend, metrics, {.address = "127.0.0.1:0", .tls_cert_file = cert, .tls_key_file = key}); });
  };
  const std::string missing = (tls.dir / "nothing.pem").string();
  CHECK_THAT(start(missing, tls.key), Catch::Contains("server.tls.cert_file") && Catch::Contains(missing));
  CHECK_THAT(start(tls.cert, missing), Catch::Contains("server.tls.key_file") && Catch::Contains(missing));
  const std::string junk = (tls.dir / "junk.pem").string();
  std::ofstream(junk) << "not a certificate\n";
  CHECK_THAT(start(junk, tls.key), Catch::Contains("server.tls.cert_file") && Catch::Contains(junk));
  CHECK_THAT(start(tls.cert, tls.cert), Catch::Contains("server.tls.key_file"));  // a certificate is no key
  // server.tls as config holds it.
  CHECK(parse_tls_options("{}").cert_file.empty());
  const TlsFiles files = parse_tls_options(json({{"cert_file", tls.cert}, {"key_file", tls.key}}).dump());
  CHECK(files.cert_file == tls.cert);
  CHECK(files.key_file == tls.key);
  CHECK_THAT(error_of([&] { parse_tls_options(json({{"cert_file", tls.cert}}).dump()); }),
             Catch::Contains("server.tls.key_file"));
  CHECK_THAT(error_of([&] { parse_tls_options(json({{"cert_file", missing}, {"key_file", tls.key}}).dump()); }),
             Catch::Contains("server.tls.cert_file") && Catch::Contains(missing));
  CHECK_THAT(error_of([] { parse_tls_options(R"({"certfile": "x"})"); }), Catch::Contains("server.tls.certfile"));
}
