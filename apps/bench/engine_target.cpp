// The in-process target (needs llmk_actors).
#include "actors/engine.hpp"
#include "apps/bench/targets.hpp"

namespace llmk::bench {
namespace {

class EngineTarget : public Target {
 public:
  explicit EngineTarget(Engine& engine) : engine_(engine) {}
  void submit(Request request, EventCallback on_event) override { engine_.submit(std::move(request), std::move(on_event)); }
  std::optional<EngineStats> stats() override { return engine_.stats(); }
  std::string name() const override { return "engine"; }

 private:
  Engine& engine_;
};

}  // namespace

std::unique_ptr<Target> make_engine_target(Engine& engine) { return std::make_unique<EngineTarget>(engine); }

}  // namespace llmk::bench
