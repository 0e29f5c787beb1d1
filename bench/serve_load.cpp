// Loopback load test of `llmk serve`: streaming requests at a fixed
// concurrency over HTTP and/or ZeroMQ; reports errors, lost or duplicated
// tokens, TTFT and inter-token latency percentiles, and throughput.
//
//   bench_serve_load --fake                       # in-process server, fake backend
//   bench_serve_load --http 127.0.0.1:8000 --zmq tcp://127.0.0.1:5555 --max-tokens 64
//
// Options: --protocol http|zmq|both (both), --requests N (200), --concurrency C (32),
// --max-tokens T (32), --prompt TEXT, --fake, --step-us U (fake step time, 1000).
// Exit status 1 when any request failed or lost tokens.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ipc/testing/fake_backend.hpp"
#include "ipc/http_server.hpp"
#include "ipc/load_generator.hpp"
#include "ipc/server.hpp"

using namespace llmk::ipc;

int main(int argc, char** argv) {
  LoadOptions o;
  std::string protocol = "both", http = "127.0.0.1:8000";
  bool fake = false;
  long step_us = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--protocol") protocol = value();
    else if (a == "--http") http = value();
    else if (a == "--zmq") o.zmq_endpoint = value();
    else if (a == "--requests") o.num_requests = std::atoi(value().c_str());
    else if (a == "--concurrency") o.concurrency = std::atoi(value().c_str());
    else if (a == "--max-tokens") o.max_tokens = std::atoi(value().c_str());
    else if (a == "--prompt") o.prompts = {value()};
    else if (a == "--fake") fake = true;
    else if (a == "--step-us") step_us = std::atol(value().c_str());
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of bench/serve_load.cpp)\n", a.c_str());
      return 2;
    }
  }

  std::unique_ptr<FakeBackend> backend;
  std::unique_ptr<Server> server;
  if (fake) {
    backend = std::make_unique<FakeBackend>(FakeBackendOptions{.step_interval = std::chrono::microseconds(step_us),
                                                               .max_context = 4096});
    server = std::make_unique<Server>(*backend, ServerOptions{.http = "127.0.0.1:0", .zmq = "tcp://127.0.0.1:*"});
    http = "127.0.0.1:" + std::to_string(server->http()->port());
    o.zmq_endpoint = server->zmq()->endpoint();
  }
  const auto [host, port] = split_host_port(http, "--http");
  o.http_host = host;
  o.http_port = port;
  int status = 0;
  for (const std::string p : {"http", "zmq"}) {
    if (protocol != "both" && protocol != p) continue;
    o.protocol = p;
    if (fake) {
      const int32_t n = o.max_tokens;
      o.expected_text = [n](const std::string& prompt) {
        return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), n);
      };
    }
    const LoadReport r = run_load(o);
    std::printf("%-4s %d requests, concurrency %d, %d tokens each: %s\n", p.c_str(), o.num_requests, o.concurrency,
                o.max_tokens, r.summary().c_str());
    for (const auto& e : r.first_errors) std::printf("  error: %s\n", e.c_str());
    if (r.num_errors > 0 || r.num_token_mismatches > 0) status = 1;
  }
  return status;
}
