#include "ipc/engine_backend.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/chat_template.hpp"
#include "core/grammar.hpp"
#include "core/tokenizer.hpp"

namespace llmk::ipc {

EngineBackend::EngineBackend(Engine& engine, std::optional<ToolParser> tool_parser) : engine_(engine) {
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
  info_.structured_outputs_refusal = structured_outputs_refusal(config.executor.device);
  if (const ChatTemplate* chat = engine.chat_template()) info_.chat_template = std::string(chat->name());
  if (tool_parser) {
    info_.tool_parser = *tool_parser;
  } else if (const ChatTemplate* chat = engine.chat_template()) {
    info_.tool_parser = detect_tool_parser(*chat);
  }
  if (engine.chat_template()) {
    spdlog::info("chat: tool calls read as {}{}", tool_parser_name(info_.tool_parser),
                 tool_parser ? " (--tool-parser)" : "");
  }

  const DisaggregationSection& pd = config.disaggregation;
  disaggregation_ = pd.mode;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(pd.timeout_s * 1000.0));
  if (pd.mode == "prefill" && engine.kv_handoffs()) {
    const std::string& http = config.server.http;
    const std::string host = http.empty() ? std::string() : http.substr(0, http.rfind(':'));
    transfer_server_ = std::make_unique<KvTransferServer>(engine.kv_handoffs(), host, pd.bootstrap_port, timeout);
    spdlog::info("disaggregation: prefill replica; K/V handoffs served on {}", transfer_server_->endpoint());
  } else if (pd.mode == "decode") {
    transfer_client_ = std::make_unique<KvTransferClient>(timeout);
    spdlog::info("disaggregation: decode replica; K/V fetched from the prefill replica a request names");
  }
}

EngineBackend::~EngineBackend() {
  transfer_client_.reset();  // ends fetches still waiting, before the engine goes
  transfer_server_.reset();
}

void EngineBackend::submit(Request request, EventCallback on_event) {
  if (!request.bootstrap || disaggregation_ == "none") {
    engine_.submit(std::move(request), std::move(on_event));
    return;
  }
  const BootstrapTicket ticket = *request.bootstrap;
  if (transfer_server_) {
    // Prefill: the prompt and its first token; the rest is the decode replica's.
    request.kv_export_key = ticket.room;
    request.sampling.max_tokens = 1;
    engine_.submit(std::move(request), std::move(on_event));
    return;
  }
  if (!transfer_client_) {
    engine_.submit(std::move(request), std::move(on_event));
    return;
  }
  transfer_client_->fetch(
      ticket.host, static_cast<uint32_t>(ticket.port), ticket.room,
      [this, request = std::move(request), on_event = std::move(on_event)](KvHandoffResult r) mutable {
        if (!r.handoff) {
          RequestEvent ev;
          ev.request_id = request.id;
          ev.finished = true;
          ev.request_done = true;
          ev.finish_reason = FinishReason::error;
          ev.error = "prefill/decode handoff: " + r.error;
          ev.error_code = ErrorCode::peer_lost;
          on_event(ev);
          return;
        }
        request.prompt_token_ids = r.handoff->prompt_tokens;
        request.prompt.clear();
        request.chat.reset();
        request.kv_import = std::move(r.handoff);
        engine_.submit(std::move(request), std::move(on_event));
      });
}

std::string EngineBackend::token_text(int32_t token_id) const { return engine_.tokenizer().id_to_piece(token_id); }

}  // namespace llmk::ipc
