// The OpenAI-compatible request and response shapes: /v1/completions and
// /v1/chat/completions bodies to llmk::Request, engine events to response
// objects and SSE chunks. No sockets here (ipc/http_server.* serves them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/backend.hpp"
#include "ipc/tool_call_parser.hpp"

namespace llmk::ipc {

enum class OpenAiEndpoint { completions, chat };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::completions;
  Request request;             // id left empty: the server assigns one
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  ToolOutputFormat tool_format;  // chat: how tool calls are read from the output (parser none: not at all)
};

// Throws ProtocolError(malformed) for a body that is not a JSON object,
// ParamError for a bad field, Error(not_found) for an unknown model and
// Error(unsupported) when the chat template cannot be applied. Chat "tools"
// and "tool_choice" are ipc/tool_choice.hpp's.
OpenAiRequest parse_openai_request(OpenAiEndpoint endpoint, const std::string& body, const Backend& backend);

// Accumulates one request's events into the response (non-streaming) or
// turns each into SSE chunks (streaming).
class OpenAiResponse {
 public:
  // tool_format: chat outputs read for tool calls (docs/tool_calls.md).
  OpenAiResponse(OpenAiEndpoint endpoint, std::string id, std::string model, const Backend& backend,
                 int32_t num_samples, bool logprobs, ToolOutputFormat tool_format = {});

  // Streaming: the chunks for one event (possibly none). For chat, a
  // sample's first chunk carries the assistant role.
  std::vector<nlohmann::json> chunks(const RequestEvent& event);
  // Streaming with include_usage: the last chunk (no choices, usage set).
  nlohmann::json usage_chunk() const;
  // Non-streaming: record every event, then response().
  void add(const RequestEvent& event);
  nlohmann::json response() const;

 private:
  struct Choice {
    std::string text;
    std::string finish_reason;
    nlohmann::json logprobs;  // completions: {tokens, token_logprobs, top_logprobs, text_offset}; chat: {content}
    bool started = false;
    std::shared_ptr<ToolCallParser> tool_calls;  // streaming with tools: the output read so far
  };
  nlohmann::json chat_delta(Choice& choice, const RequestEvent& event);
  nlohmann::json logprobs_delta(const RequestEvent& event, size_t text_offset) const;
  void append_logprobs(Choice& choice, const nlohmann::json& delta) const;
  nlohmann::json usage_json() const;
  void count_usage(const RequestEvent& event);

  const OpenAiEndpoint endpoint_;
  const std::string id_;
  const std::string model_;
  const Backend& backend_;
  const bool logprobs_;
  const int64_t created_;
  const ToolOutputFormat tool_format_;
  std::vector<Choice> choices_;
  Usage usage_;
};

}  // namespace llmk::ipc
