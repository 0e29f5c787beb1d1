// What llmk's own HTTP clients (llmk bench's http target, the load
// generator) share to reach `llmk serve`: a cpp-httplib connection, plain
// or TLS verifying the server's certificate, with the API key on every
// request; and the words for a request that got no HTTP answer. Header
// only: the bench's target builds without llmk_ipc.
#pragma once

#include <httplib.h>
#include <openssl/x509_vfy.h>

#include <memory>
#include <string>

namespace llmk::ipc {

// TLS verifies the certificate against ca_file (empty: the system's trust store).
inline std::unique_ptr<httplib::Client> open_http_client(const std::string& host, int port, bool tls,
                                                         const std::string& ca_file, const std::string& api_key) {
  std::unique_ptr<httplib::Client> cli;
  if (tls) {
    const bool ipv6 = host.find(':') != std::string::npos;
    cli = std::make_unique<httplib::Client>("https://" + (ipv6 ? "[" + host + "]" : host) + ":" +
                                            std::to_string(port));
    cli->enable_server_certificate_verification(true);
    if (!ca_file.empty()) cli->set_ca_cert_path(ca_file);
  } else {
    cli = std::make_unique<httplib::Client>(host, port);
  }
  if (!api_key.empty()) cli->set_bearer_token_auth(api_key);
  return cli;
}

// Why a request got no HTTP answer. TLS failures say what to change, most
// often a self-signed certificate without a CA file; `ca_option` names how
// the caller's user gives one ("--ca-file", "ca_file").
inline std::string http_connection_error(const httplib::Client& cli, httplib::Error error, const std::string& host,
                                         const std::string& ca_file, const std::string& ca_option) {
  if (error == httplib::Error::SSLServerVerification) {
    const long result = cli.get_openssl_verify_result();
    std::string what = "OpenSSL verify result " + std::to_string(result);
    if (result == X509_V_OK) what = "it does not name host " + host;
    if (result == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT || result == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
        result == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY) {
      what += ": signed by a CA that is not trusted";
    }
    return "TLS: the server's certificate failed verification (" + what + "); " +
           (ca_file.empty() ? "without " + ca_option + " only the system's trust store is used"
                            : "trusted CAs: " + ca_option + " " + ca_file);
  }
  if (error == httplib::Error::SSLLoadingCerts)
    return "TLS: cannot load the CA certificates of " + ca_option + " " + ca_file;
  if (error == httplib::Error::SSLConnection) return "TLS: the handshake failed (is the server serving HTTPS?)";
  return "HTTP request failed: " + httplib::to_string(error);
}

}  // namespace llmk::ipc
