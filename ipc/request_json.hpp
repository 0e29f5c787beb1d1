// Request fields shared by the ZeroMQ protocol and the OpenAI-compatible
// HTTP API: sampling parameters and prompts, read from JSON with strict
// types and ranges. Every violation throws ParamError naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/request.hpp"

namespace llmk::ipc {

enum class LogprobsStyle {
  integer,  // "logprobs": k  (completions, ZeroMQ)
  chat,     // "logprobs": bool + "top_logprobs": k
};

// Reads max_tokens (or max_completion_tokens), temperature, top_p, top_k,
// min_p, stop, stop_token_ids, n, seed, logprobs, presence_penalty,
// frequency_penalty, repetition_penalty, ignore_eos and beam search
// (use_beam_search, beam_width or best_of, length_penalty, early_stopping:
// docs/beam_search.md) from `body` with
// strict types; absent keys keep the defaults (max_tokens:
// default_max_tokens). max_tokens must fit in max_context; every other bound
// is validate_sampling_params' (core/request.hpp), applied here so that the
// error names the field as the request spelled it.
SamplingParams parse_sampling(const nlohmann::json& body, LogprobsStyle style, int32_t max_context,
                              int32_t default_max_tokens = 16);

// A prompt given as text or as token ids (an array of integers, or a
// one-element array holding either). Fills request.prompt or
// request.prompt_token_ids; `param` names the field in errors.
void parse_prompt(const nlohmann::json& value, const std::string& param, int32_t vocab_size, Request& request);

// A router's prefill/decode pairing (SGLang's bootstrap_host,
// bootstrap_port and bootstrap_room; the room an integer or a string): fills
// request.bootstrap when bootstrap_room is present and not null; host and
// port are then required. The fields' names, for parsers that refuse
// unknown ones.
void parse_bootstrap(const nlohmann::json& body, Request& request);
inline constexpr const char* kBootstrapFields[] = {"bootstrap_host", "bootstrap_port", "bootstrap_room"};

// "stop", "length", "cancelled", "error" ("" for none): the wire names.
std::string finish_reason_string(FinishReason reason);

// Typed field access: absent -> fallback; wrong type -> ParamError.
std::string get_string(const nlohmann::json& obj, const std::string& key, const std::string& fallback);
bool get_bool(const nlohmann::json& obj, const std::string& key, bool fallback);

}  // namespace llmk::ipc
