// ipc::Backend: what the front ends (ZeroMQ server, HTTP gateway) need from
// an engine. EngineBackend adapts llmk::Engine to it; FakeBackend
// (ipc/testing/fake_backend.hpp) streams deterministic tokens for tests and benches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/embedding.hpp"
#include "core/engine_stats.hpp"
#include "core/error.hpp"
#include "core/chat_template.hpp"
#include "core/request.hpp"
#include "ipc/tool_call_parser.hpp"

namespace llmk::ipc {

using ChatMessage = llmk::ChatMessage;  // {role, content, tool_calls, tool_call_id, name}
using ChatRenderOptions = llmk::ChatRenderOptions;  // {tools, add_generation_prompt}

struct ModelInfo {
  std::string name;             // the served model name (HTTP "model")
  int32_t max_context = 0;      // tokens: prompt + completion
  int32_t vocab_size = 0;
  std::string chat_template;    // "" when the model has none
  uint32_t max_queue = 0;       // waiting requests beyond this are refused
  std::string model_path;       // where it was loaded from ("" when not from a path)
  ToolParser tool_parser = ToolParser::none;  // how chat outputs are read for tool calls
  // Why requests for structured outputs are refused (docs/structured_outputs.md); "" when served.
  std::string structured_outputs_refusal = "structured outputs are not served by this backend";
};

class Backend {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;
  virtual ~Backend() = default;

  // Queues a request (a text prompt, token ids, or a chat that the backend
  // renders with the model's template and tokenizes itself). Never blocks on
  // the engine. Events arrive on a backend thread, in order per request; the
  // last one has request_done. A refused request (invalid, too long, queue
  // full, a chat the template refuses or no template) is answered by one
  // finished event with finish_reason == error and its error_code, exactly
  // as a later failure. request.id must be unique among live requests (front
  // ends make their own).
  virtual void submit(Request request, EventCallback on_event) = 0;
  // Cancels a live request; its KV is freed and a final event with
  // finish_reason == cancelled follows. false when the id is not live.
  virtual bool cancel(const std::string& request_id) = 0;
  virtual EngineStats stats() const = 0;
  // Drops the prefix-cache blocks no live request holds; returns how many
  // (0 without a prefix cache). Throws llmk::Error when the engine fails.
  virtual uint32_t flush_cache() = 0;
  virtual ModelInfo model_info() const = 0;
  // The text of one token (for logprobs); "" for special tokens.
  virtual std::string token_text(int32_t token_id) const = 0;
  // /v1/embeddings (ipc/embeddings.hpp): a text input's token ids, and one
  // input's pooled vector; blocking. Throw as Engine::embed and
  // Engine::embedding_ids do; a backend without embeddings refuses with
  // Error(unsupported).
  virtual std::vector<int32_t> embedding_ids(const std::string& /*text*/) const {
    throw Error(ErrorCode::unsupported, "this server does not compute embeddings");
  }
  virtual std::vector<float> embed(const std::vector<int32_t>& /*token_ids*/, const EmbeddingParams& /*params*/) {
    throw Error(ErrorCode::unsupported, "this server does not compute embeddings");
  }
  // The pooling of a request that names none (core/embedding.hpp).
  virtual Pooling default_pooling() const { return Pooling::last; }
};

}  // namespace llmk::ipc
