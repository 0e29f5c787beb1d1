#include "ipc/engine_backend.hpp"

#include <filesystem>

#include "core/chat_template.hpp"
#include "core/tokenizer.hpp"

namespace llmk::ipc {

EngineBackend::EngineBackend(Engine& engine) : engine_(engine) {
  const EngineConfig& config = engine.config();
  const ModelConfig& model = engine.model_config();
  info_.name = config.server.served_model_name;
  info_.model_path = config.model.path;
  if (info_.name.empty()) {
    const std::filesystem::path dir = std::filesystem::path(config.model.path).lexically_normal();
    info_.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
    if (info_.name.empty()) info_.name = config.model.preset.empty() ? "llmk" : config.model.preset;
  }
  info_.max_context = config.kv_cache.max_seq_len > 0
                          ? std::min<int32_t>(static_cast<int32_t>(config.kv_cache.max_seq_len),
                                              model.max_position_embeddings)
                          : model.max_position_embeddings;
  info_.vocab_size = engine.tokenizer().vocab_size();
  info_.max_queue = config.scheduler.max_queue;
  if (const ChatTemplate* chat = engine.chat_template()) info_.chat_template = std::string(chat->name());
}

std::string EngineBackend::token_text(int32_t token_id) const { return engine_.tokenizer().id_to_piece(token_id); }

}  // namespace llmk::ipc
