// A self-signed certificate for 127.0.0.1 made with the openssl command, for
// the TLS tests of the HTTP front end and of llmk's own HTTP clients.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "support/command.hpp"

namespace llmk::test {

// A directory with the certificate (cert.pem) and its key (key.pem); empty
// paths when openssl is not installed.
struct SelfSigned {
  std::filesystem::path dir;
  std::string cert, key;
  SelfSigned() {
    if (run_command("command -v openssl >/dev/null 2>&1 && echo yes").out.find("yes") == std::string::npos) return;
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("llmk_tls_" + std::to_string(::getpid()) + "_" + std::to_string(++counter));
    std::filesystem::create_directories(dir);
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    const auto r = run_command(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert + " 2>&1");
    INFO(r.out);
    REQUIRE(r.status == 0);
  }
  ~SelfSigned() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
  SelfSigned(const SelfSigned&) = delete;
  SelfSigned& operator=(const SelfSigned&) = delete;
  bool available() const { return !cert.empty(); }
};

}  // namespace llmk::test
