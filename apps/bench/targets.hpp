// Targets for the real front ends. Each is compiled only where its library
// is built: the Engine (llmk_actors), llmk::Client (llmk_ipc); HTTP always.
#pragma once

#include <memory>
#include <string>

#include "apps/bench/target.hpp"
#include "core/config.hpp"

namespace llmk {
class Engine;
}

namespace llmk::bench {

// In-process: submits to the Engine (owned elsewhere).
std::unique_ptr<Target> make_engine_target(Engine& engine);
// `llmk serve` over ZeroMQ, e.g. "tcp://127.0.0.1:5555"; stats via the protocol.
std::unique_ptr<Target> make_zmq_target(const std::string& endpoint);
// Where and how to reach `llmk serve` over HTTP.
struct HttpEndpoint {
  std::string host = "127.0.0.1";
  int port = 8000;
  bool tls = false;     // https: the server's certificate is verified
  std::string ca_file;  // tls: PEM of the CAs to trust; empty: the system's trust store
  std::string api_key;  // sent as "Authorization: Bearer"; empty: none. Never printed.
};

// "HOST:PORT", "http://HOST:PORT" or "https://HOST:PORT" (an IPv6 host in
// brackets); throws Error naming the URL and what is wrong with it.
HttpEndpoint parse_http_url(const std::string& url);

// `llmk serve` over HTTP: POST /v1/completions with stream=true (SSE);
// each chunk counts as one token. No server stats (nullopt). Asks the server
// for its models first (the served model when `model` is empty): an
// unreachable server, a certificate that fails verification or a refused key
// throw Error saying so, before any request is timed.
std::unique_ptr<Target> make_http_target(const HttpEndpoint& endpoint, const std::string& model);

}  // namespace llmk::bench
