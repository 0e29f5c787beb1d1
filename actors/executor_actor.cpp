// The executor actor: holds the Executor (core/executor.hpp) and runs one
// forward per step, then hands a view of the logits (which stay where the
// executor wrote them) to the sampler, whose answer goes straight back to
// the scheduler (delegation: the executor is free for the next step at once).
// Detached: it has its own thread, so a forward never blocks the other
// actors' workers.
//
// The view is valid until the next execute(). The scheduler keeps one step
// in flight and sends the next StepWork only after this step's StepResult
// came back from the sampler, so the sampler has read the logits by then.
#include <spdlog/spdlog.h>

#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"

namespace llmk {

namespace {

struct ExecutorState {
  ExecutorState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::shared_ptr<Executor> executor;
  sampler_actor sampler;
  PipelineContext context;
  static inline const char* name = "executor";
};

using ExecutorPointer = executor_actor::stateful_pointer<ExecutorState>;

caf::result<StepResult> execute(ExecutorPointer self, StepWork& work) {
  auto& st = self->state;
  const uint64_t step = work.sample.step;
  if (st.context.tracer) st.context.tracer->observe("executor", "execute", {}, step);
  LogitsView logits;
  try {
    ScopedSpan span(st.context.tracer.get(), "execute", "executor", step, work.batch.num_tokens());
    double start = now_s();
    logits = st.executor->execute(work.batch);
    work.sample.forward_s = now_s() - start;
  } catch (const Error& e) {
    return make_actor_error(static_cast<int>(e.code()), std::string("forward failed: ") + e.what());
  } catch (const std::exception& e) {
    return make_actor_error(static_cast<int>(ErrorCode::internal), std::string("forward failed: ") + e.what());
  }
  return self->delegate(st.sampler, sample_atom::value, std::move(work.sample), logits);
}

}  // namespace

executor_actor spawn_executor(caf::actor_system& system, std::shared_ptr<Executor> executor, sampler_actor sampler,
                              PipelineContext context) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn<caf::detached>(
      [](ExecutorPointer self, std::shared_ptr<Executor> executor, sampler_actor sampler,
         PipelineContext context) -> executor_actor::behavior_type {
    self->state.executor = executor;
    self->state.sampler = sampler;
    self->state.context = context;
    return {
        [self](execute_atom, StepWork& work) -> caf::result<StepResult> { return execute(self, work); },
    };
  }, std::move(executor), std::move(sampler), std::move(context));
}

}  // namespace llmk
