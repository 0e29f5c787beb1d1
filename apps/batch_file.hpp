// `llmk generate --batch-file F.jsonl`: one request per line in, one JSON
// result per line out (in input order).
//
// A line: {"id", "prompt", "max_tokens", "temperature", "top_p", "seed",
// "stop", "n"} (also "top_k", "ignore_eos", "logprobs"); only "prompt" is
// required, missing values come from the command line's flags, "id" defaults
// to "line-<N>" (1-based), "stop" is a string or a list of strings.
//
// A result: {"id", "text", "token_ids", "finish_reason", "usage", "timings"}
// with usage = {"prompt_tokens", "completion_tokens", "cached_prompt_tokens"}
// and timings = {"queue_s", "time_to_first_token_s", "e2e_s"}. With n > 1
// the per-sample fields move into "choices": [{"index", "text",
// "token_ids", "finish_reason", "usage", "timings"}, ...] and "usage" sums
// the completion tokens of all samples. A refused request or a bad line gives
// {"id", "finish_reason": "error", "error": "..."}.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/request.hpp"

namespace llmk::app {

// Parses one line over the defaults; throws std::invalid_argument naming the
// bad key.
Request parse_batch_line(const std::string& line, int line_number, const Request& defaults);

// Accumulates one request's events.
struct BatchResult {
  std::string id;
  std::string error;  // set for a bad line or a refused request
  struct Sample {
    std::string text;
    std::vector<int32_t> token_ids;
    FinishReason finish_reason = FinishReason::none;
    std::string error;
    Usage usage;
    Timings timings;
  };
  std::map<int32_t, Sample> samples;
  void add(const RequestEvent& event);
  nlohmann::json to_json() const;
};

}  // namespace llmk::app
