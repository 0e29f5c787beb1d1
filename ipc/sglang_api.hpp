// SGLang's native worker API, as the routers in front of SGLang workers
// (sglang-router, vllm-router) call it: the POST /generate request and
// response shapes, and the server and model descriptions they read when a
// worker joins. No sockets here (ipc/http_server.* serves them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/backend.hpp"

namespace llmk::ipc {

struct SglangGenerateRequest {
  Request request;  // id left empty: the server assigns one
  bool stream = false;
  std::string rid;  // the client's "rid", echoed as meta_info.id ("" = none: the server's id)
};

// A /generate body: {"text": str} or {"input_ids": [int]}, an optional
// "sampling_params" object (max_new_tokens, temperature, top_p, top_k,
// min_p, stop, stop_token_ids, ignore_eos, n, the three penalties,
// sampling_seed) and "stream". Fields that only switch off features llmk
// lacks are accepted at their off value; anything else unknown is refused.
// Throws ProtocolError(malformed) for a body that is not a JSON object and
// ParamError naming the field otherwise.
SglangGenerateRequest parse_sglang_generate(const std::string& body, const Backend& backend);

// One /generate request's events as SGLang answers them: per sample
// {"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
// "completion_tokens", "cached_tokens", "e2e_latency"}}; a list of those
// when n > 1. Streamed chunks carry the text and ids so far (SGLang's
// default, not deltas), finish_reason null until the sample ends.
class SglangResponse {
 public:
  SglangResponse(std::string id, int32_t num_samples);

  std::vector<nlohmann::json> chunks(const RequestEvent& event);  // streaming
  nlohmann::json usage_chunk() const { return nullptr; }          // SGLang streams no usage chunk
  void add(const RequestEvent& event);                            // non-streaming
  nlohmann::json response() const;

 private:
  struct Sample {
    std::string text;
    std::vector<int32_t> output_ids;
    nlohmann::json finish_reason;  // null until finished
    Usage usage;
    double e2e_s = 0;
  };
  nlohmann::json sample_json(size_t index) const;

  const std::string id_;
  std::vector<Sample> samples_;
};

// GET /get_server_info (and /server_info): what this replica serves.
nlohmann::json sglang_server_info(const Backend& backend, const std::string& replica_name);
// GET /get_model_info (and /model_info).
nlohmann::json sglang_model_info(const Backend& backend);
// GET /get_load, which sglang-router's load monitor reads (power_of_two):
// one entry per data-parallel rank (llmk: one), {"dp_rank", "num_reqs",
// "num_waiting_reqs", "num_tokens"}; the router sums num_tokens, here the
// KV slots live requests hold.
nlohmann::json sglang_load(const Backend& backend);
// POST (or GET) /flush_cache, which both routers send every worker: drops
// the prefix-cache blocks no live request holds (running requests keep
// theirs, so it is never refused) and answers {"status": "ok",
// "num_dropped_blocks": N}. Throws what Backend::flush_cache throws.
nlohmann::json sglang_flush_cache(Backend& backend);

}  // namespace llmk::ipc
