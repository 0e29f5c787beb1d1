// A closed-loop load generator for `llmk serve`: N streaming requests at a
// fixed concurrency over HTTP (SSE) or ZeroMQ, checking that every request
// succeeds and that no token is lost or duplicated. Used by
// bench/serve_load.cpp and the ipc tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llmk::ipc {

struct LoadOptions {
  std::string protocol = "http";        // http | zmq
  std::string http_host = "127.0.0.1";
  int http_port = 8000;
  bool http_tls = false;                // https: the server's certificate is verified
  std::string ca_file;                  // http_tls: PEM of the CAs to trust; empty: the system's store
  std::string api_key;                  // sent as "Authorization: Bearer"; empty: none
  std::string zmq_endpoint = "tcp://127.0.0.1:5555";
  int32_t num_requests = 200;
  int32_t concurrency = 32;
  int32_t max_tokens = 32;
  bool ignore_eos = true;               // every request generates max_tokens
  std::vector<std::string> prompts = {"Once upon a time"};  // request i uses prompts[i % size]
  // When set, the text each prompt must produce (greedy): a mismatch counts
  // as lost or duplicated tokens.
  std::function<std::string(const std::string& prompt)> expected_text;
  double timeout_s = 120;               // per request
};

struct LoadReport {
  int32_t num_ok = 0;
  int32_t num_errors = 0;
  int32_t num_token_mismatches = 0;     // streamed tokens != usage, or text != expected
  // Up to 5. A refused key (401) and a certificate that fails verification
  // are named as such.
  std::vector<std::string> first_errors;
  uint64_t num_tokens = 0;              // streamed
  double wall_s = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0;    // client side: send to first token
  double itl_p50_s = 0, itl_p99_s = 0;      // between streamed tokens
  double e2e_p50_s = 0, e2e_p99_s = 0;
  double tokens_per_s() const { return wall_s > 0 ? static_cast<double>(num_tokens) / wall_s : 0; }
  double requests_per_s() const { return wall_s > 0 ? num_ok / wall_s : 0; }
  std::string summary() const;  // one human-readable line
};

LoadReport run_load(const LoadOptions& options);

}  // namespace llmk::ipc
