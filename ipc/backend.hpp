// ipc::Backend: what the front ends (ZeroMQ server, HTTP gateway) need from
// an engine. EngineBackend adapts llmk::Engine to it; FakeBackend
// (ipc/fake_backend.hpp) streams deterministic tokens for tests and benches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/engine.hpp"  // EngineStats (the header only; no link dependency)
#include "core/chat_template.hpp"
#include "core/request.hpp"

namespace llmk::ipc {

using ChatMessage = llmk::ChatMessage;  // {role, content, tool_calls, tool_call_id, name}
using ChatRenderOptions = llmk::ChatRenderOptions;  // {tools, add_generation_prompt}

// A chat rendered by the model's template: token ids when the template
// needs special tokens (llama-2's BOS/EOS per turn), else text.
struct ChatPrompt {
  std::string text;
  std::vector<int32_t> token_ids;  // when not empty, the prompt (text is for logs)
  bool add_bos = true;             // for a text prompt
};

struct ModelInfo {
  std::string name;             // the served model name (HTTP "model")
  int32_t max_context = 0;      // tokens: prompt + completion
  int32_t vocab_size = 0;
  std::string chat_template;    // "" when the model has none
  uint32_t max_queue = 0;       // waiting requests beyond this are refused
};

class Backend {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;
  virtual ~Backend() = default;

  // Queues a request. Events arrive on a backend thread, in order per
  // request; the last one has request_done. A request refused up front
  // (invalid, queue full) is answered by one finished event with
  // finish_reason == error and its error_code, exactly as a later failure.
  // request.id must be unique among live requests (front ends make their own).
  virtual void submit(Request request, EventCallback on_event) = 0;
  // Cancels a live request; its KV is freed and a final event with
  // finish_reason == cancelled follows. false when the id is not live.
  virtual bool cancel(const std::string& request_id) = 0;
  virtual EngineStats stats() const = 0;
  virtual ModelInfo model_info() const = 0;
  // Renders messages (and the request's tools) with the model's chat
  // template. Throws Error(invalid_argument) for bad messages (including a
  // template's raise_exception, naming its message) and Error(unsupported)
  // when no template applies (naming model.chat_template).
  virtual ChatPrompt apply_chat_template(const std::vector<ChatMessage>& messages,
                                         const ChatRenderOptions& options = {}) const = 0;
  // The text of one token (for logprobs); "" for special tokens.
  virtual std::string token_text(int32_t token_id) const = 0;
};

}  // namespace llmk::ipc
