#include "ipc/engine_backend.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/tokenizer.hpp"

namespace llmk::ipc {
namespace {

RequestEvent refusal(const std::string& id, ErrorCode code, std::string message) {
  RequestEvent ev;
  ev.request_id = id;
  ev.finished = ev.request_done = true;
  ev.finish_reason = FinishReason::error;
  ev.error_code = code;
  ev.error = std::move(message);
  return ev;
}

}  // namespace

EngineBackend::EngineBackend(Engine& engine) : engine_(engine) {
  const EngineConfig& config = engine.config();
  const ModelConfig& model = engine.model_config();
  info_.name = config.server.served_model_name;
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
  try {
    chat_template_ = std::make_unique<ChatTemplate>(resolve_chat_template(config.model.chat_template, config.model.path));
    info_.chat_template = std::string(chat_template_->name());
  } catch (const Error& e) {
    chat_template_error_ = e.what();
  }
}

void EngineBackend::submit(Request request, EventCallback on_event) {
  // What the engine would refuse later, refused now with its proper code
  // (the engine's own refusals carry only a message).
  if (engine_.stats().num_waiting >= info_.max_queue) {
    return on_event(refusal(request.id, ErrorCode::overloaded,
                            "the waiting queue is full (scheduler.max_queue = " + std::to_string(info_.max_queue) +
                                ")"));
  }
  const int64_t budget = static_cast<int64_t>(info_.max_context) - request.sampling.max_tokens;
  int64_t num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  // A text prompt has at most one token per byte, plus BOS: only a long one
  // needs counting.
  if (request.prompt_token_ids.empty() && static_cast<int64_t>(request.prompt.size()) + 2 > budget) {
    num_prompt = static_cast<int64_t>(
        engine_.tokenizer().encode(request.prompt, request.add_bos && engine_.model_config().add_bos_token).size());
  }
  if (num_prompt > budget) {
    return on_event(refusal(request.id, ErrorCode::invalid_argument,
                            "this model's context holds " + std::to_string(info_.max_context) + " tokens, but " +
                                std::to_string(num_prompt + request.sampling.max_tokens) + " were requested (" +
                                std::to_string(num_prompt) + " in the prompt, " +
                                std::to_string(request.sampling.max_tokens) + " for the completion)"));
  }
  engine_.submit(std::move(request), std::move(on_event));
}

ChatPrompt EngineBackend::apply_chat_template(const std::vector<ChatMessage>& messages,
                                              const ChatRenderOptions& options) const {
  if (!chat_template_) throw Error(ErrorCode::unsupported, chat_template_error_);
  ChatPrompt prompt;
  prompt.text = chat_template_->render(messages, options);
  if (chat_template_->kind() == ChatTemplate::Kind::jinja) {
    // The template wrote its own special tokens (BOS included) as text.
    prompt.token_ids = engine_.tokenizer().encode_with_special_tokens(prompt.text, false);
  } else {
    prompt.token_ids =
        chat_template_->encode(messages, options, engine_.tokenizer(), engine_.model_config().add_bos_token);
  }
  return prompt;
}

std::string EngineBackend::token_text(int32_t token_id) const { return engine_.tokenizer().id_to_piece(token_id); }

}  // namespace llmk::ipc
