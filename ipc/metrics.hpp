// Request and token metrics shared by the front ends, rendered in the
// Prometheus text format (GET /metrics) together with the engine's gauges.
// Thread-safe: front ends record from backend threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine_stats.hpp"
#include "core/request.hpp"

namespace llmk::ipc {

enum class Frontend { http, zmq };

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // seconds, increasing; +Inf is implicit
  void observe(double value);
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // Every sample carries the label replica="<name>" once it is set (the
  // server names its replica after binding: server.replica_name, else
  // HOST:PORT), so that a fleet's metrics can be told apart.
  void set_replica_name(const std::string& name);
  std::string replica_name() const;
  // Every finished sample's event (finished == true): counts the request
  // on request_done, tokens, and the latency histograms.
  void on_finished(Frontend frontend, const RequestEvent& event);
  // A request refused before reaching the backend (bad JSON, bad params...).
  // A per-key refusal also names the key (never its secret) and the limit.
  void on_rejected(Frontend frontend, const std::string& code, const std::string& key_name = "",
                   const std::string& reason = "");
  // A request for embeddings answered (HTTP /v1/embeddings, ZeroMQ
  // "embed"): its inputs and their prompt tokens.
  void on_embeddings(Frontend frontend, size_t num_inputs, int64_t prompt_tokens);
  std::string render(const EngineStats& stats) const;

 private:
  mutable std::mutex mutex_;
  std::string replica_name_;
  std::map<std::pair<std::string, std::string>, uint64_t> num_requests_;  // (frontend, finish_reason)
  std::map<std::array<std::string, 4>, uint64_t> num_rejected_;  // (frontend, code, key, reason)
  uint64_t num_prompt_tokens_ = 0;
  uint64_t num_generation_tokens_ = 0;
  struct EmbeddingCounts {
    uint64_t requests = 0, inputs = 0, prompt_tokens = 0;
  };
  std::map<std::string, EmbeddingCounts> embeddings_;  // by front end
  Histogram ttft_;
  Histogram inter_token_;
  Histogram e2e_;
};

}  // namespace llmk::ipc
