// The executor actor: owns the Model and runs one forward per step, then
// hands the logits to the sampler, whose answer goes straight back to the
// scheduler (delegation: the executor is free for the next step at once).
// Detached: it has its own thread, so a forward never blocks the other
// actors' workers.
#include <spdlog/spdlog.h>

#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/model.hpp"

namespace llmk {

namespace {

struct ExecutorState {
  ExecutorState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::shared_ptr<Model> model;
  sampler_actor sampler;
  PipelineContext context;
  static inline const char* name = "executor";
};

using ExecutorPointer = executor_actor::stateful_pointer<ExecutorState>;

caf::result<StepResult> execute(ExecutorPointer self, StepWork& work) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("executor", "execute", {}, work.step);
  std::vector<float> logits;  // [num_logits, vocab_size]
  try {
    ScopedSpan span(st.context.tracer.get(), "execute", "executor", work.step, work.batch.num_tokens());
    double start = now_s();
    logits.resize(static_cast<size_t>(work.batch.num_logits()) * static_cast<size_t>(work.vocab_size));
    st.model->forward(work.batch, logits.data());
    work.forward_s = now_s() - start;
  } catch (const Error& e) {
    return make_actor_error(static_cast<int>(e.code()), std::string("forward failed: ") + e.what());
  } catch (const std::exception& e) {
    return make_actor_error(static_cast<int>(ErrorCode::internal), std::string("forward failed: ") + e.what());
  }
  return self->delegate(st.sampler, sample_atom::value, std::move(work), std::move(logits));
}

}  // namespace

executor_actor spawn_executor(caf::actor_system& system, std::shared_ptr<Model> model, sampler_actor sampler,
                              PipelineContext context) {
  return system.spawn<caf::detached>([=](ExecutorPointer self) -> executor_actor::behavior_type {
    self->state.model = model;
    self->state.sampler = sampler;
    self->state.context = context;
    return {
        [self](execute_atom, StepWork& work) -> caf::result<StepResult> { return execute(self, work); },
    };
  });
}

}  // namespace llmk
