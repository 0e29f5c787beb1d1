// EngineBackend: llmk::Engine as an ipc::Backend. Besides forwarding, it
// refuses up front, with the right error code, what the engine would refuse
// later: a full queue (overloaded) and a prompt that does not fit the
// context (invalid_argument).
#pragma once

#include <memory>

#include "actors/engine.hpp"
#include "ipc/backend.hpp"

namespace llmk::ipc {

class EngineBackend : public Backend {
 public:
  // The engine must outlive this adapter. Resolves the chat template now
  // (none is not an error until a chat request arrives).
  explicit EngineBackend(Engine& engine);

  void submit(Request request, EventCallback on_event) override;
  bool cancel(const std::string& request_id) override { return engine_.cancel(request_id); }
  EngineStats stats() const override { return engine_.stats(); }
  ModelInfo model_info() const override { return info_; }
  ChatPrompt apply_chat_template(const std::vector<ChatMessage>& messages,
                                 const ChatRenderOptions& options = {}) const override;
  std::string token_text(int32_t token_id) const override;

 private:
  Engine& engine_;
  ModelInfo info_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::string chat_template_error_;  // why there is none
};

}  // namespace llmk::ipc
