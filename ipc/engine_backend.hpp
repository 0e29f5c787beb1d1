// EngineBackend: llmk::Engine as an ipc::Backend. It only forwards: the
// engine's scheduler decides admission and answers a refusal as the
// request's one error event, with its code (invalid_argument, overloaded).
#pragma once

#include "actors/engine.hpp"
#include "ipc/backend.hpp"

namespace llmk::ipc {

class EngineBackend : public Backend {
 public:
  // The engine must outlive this adapter.
  explicit EngineBackend(Engine& engine);

  void submit(Request request, EventCallback on_event) override { engine_.submit(std::move(request), std::move(on_event)); }
  bool cancel(const std::string& request_id) override { return engine_.cancel(request_id); }
  EngineStats stats() const override { return engine_.stats(); }
  uint32_t flush_cache() override { return engine_.flush_cache(); }
  ModelInfo model_info() const override { return info_; }
  std::string token_text(int32_t token_id) const override;

 private:
  Engine& engine_;
  ModelInfo info_;
};

}  // namespace llmk::ipc
