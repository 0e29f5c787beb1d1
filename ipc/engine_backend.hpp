// EngineBackend: llmk::Engine as an ipc::Backend. It forwards: the
// engine's scheduler decides admission and answers a refusal as the
// request's one error event, with its code (invalid_argument, overloaded).
// In a disaggregation mode it also pairs requests that carry a router's
// bootstrap fields with their twin on the other replica (docs/replicas.md):
// a prefill replica serves its handoffs on disaggregation.bootstrap_port,
// a decode replica fetches the handoff before submitting.
#pragma once

#include <memory>
#include <optional>

#include "actors/engine.hpp"
#include "ipc/backend.hpp"
#include "ipc/kv_transfer.hpp"

namespace llmk::ipc {

class EngineBackend : public Backend {
 public:
  // The engine must outlive this adapter. tool_parser: how chat outputs are
  // read for tool calls (llmk serve --tool-parser); by default the family
  // whose format the chat template writes (detect_tool_parser).
  // Throws Error(invalid_config) when a prefill replica cannot bind its
  // transfer endpoint.
  explicit EngineBackend(Engine& engine, std::optional<ToolParser> tool_parser = std::nullopt);
  ~EngineBackend() override;

  void submit(Request request, EventCallback on_event) override;
  bool cancel(const std::string& request_id) override { return engine_.cancel(request_id); }
  EngineStats stats() const override { return engine_.stats(); }
  uint32_t flush_cache() override { return engine_.flush_cache(); }
  ModelInfo model_info() const override { return info_; }
  std::string token_text(int32_t token_id) const override;
  std::vector<int32_t> embedding_ids(const std::string& text) const override { return engine_.embedding_ids(text); }
  std::vector<float> embed(const std::vector<int32_t>& token_ids, const EmbeddingParams& params) override {
    return engine_.embed(token_ids, params);
  }
  Pooling default_pooling() const override { return llmk::default_pooling(engine_.model_config()); }

 private:
  Engine& engine_;
  ModelInfo info_;
  std::string disaggregation_;                  // disaggregation.mode
  std::unique_ptr<KvTransferServer> transfer_server_;  // prefill
  std::unique_ptr<KvTransferClient> transfer_client_;  // decode
};

}  // namespace llmk::ipc
