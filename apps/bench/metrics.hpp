// Client-side request records and the figures computed from them:
// throughput, TTFT, TPOT, inter-token latency and end-to-end latency.
//
// Definitions (as in vLLM's benchmark_serving):
//   TTFT  = first token's arrival - submit time
//   TPOT  = (e2e - TTFT) / (num_output_tokens - 1), per request with > 1 token
//   ITL   = gaps between consecutive token arrivals, pooled over requests
//           (tokens delivered in one event share its arrival time)
//   e2e   = last event's arrival - submit time
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/request.hpp"

namespace llmk::bench {

// Linear interpolation between closest ranks (numpy's default): q in [0, 100].
// Empty input gives 0.
double percentile(std::vector<double> values, double q);

struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  size_t count = 0;
};
Distribution distribution(const std::vector<double>& values);

struct RequestRecord {
  std::string id;
  double submit_s = 0;                // run clock: when submit() was called
  std::vector<double> token_times_s;  // run clock: arrival of each output token
  double done_s = 0;                  // run clock: the request_done event
  std::vector<int32_t> output_ids;    // sample 0's tokens (empty over HTTP)
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;      // the server's usage when it reports one, else tokens seen
  FinishReason finish_reason = FinishReason::none;
  std::string error;
  bool ok() const { return finish_reason != FinishReason::error && finish_reason != FinishReason::none; }
};

struct Summary {
  size_t num_ok = 0;
  size_t num_errors = 0;
  double duration_s = 0;              // first submit to last completion
  uint64_t num_prompt_tokens = 0;
  uint64_t num_output_tokens = 0;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;      // prompt + output
  Distribution ttft_s, tpot_s, itl_s, e2e_s;
};

Summary summarize(const std::vector<RequestRecord>& records);

}  // namespace llmk::bench
