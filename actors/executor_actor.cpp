// The executor actor: holds the Executor (core/executor.hpp) and runs one
// forward per step, then hands a view of the logits (which stay where the
// executor wrote them) to the sampler, whose answer goes straight back to
// the scheduler (delegation: the executor is free for the next step at once).
// Detached: it has its own thread, so a forward never blocks the other
// actors' workers.
//
// The view is valid until the next execute(). Before each forward the
// actor waits until the sampler has taken the previous step's logits and
// published its ids (actors/step_feedback.hpp); a step planned ahead reads
// those ids for its fed-back rows. With one step in flight that wait returns
// at once: the ids came back before the step was even planned.
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
  uint64_t previous_step = 0;  // the last step run (0: none yet)
  static inline const char* name = "executor";
};

using ExecutorPointer = executor_actor::stateful_pointer<ExecutorState>;

caf::result<StepResult> execute(ExecutorPointer self, StepWork& work) {
  auto& st = self->state;
  const uint64_t step = work.sample.step;
  if (st.context.tracer) st.context.tracer->observe("executor", "execute", {}, step);
  LogitsView logits;
  auto fail = [&](ErrorCode code, const char* what) {
    st.context.feedback->fail(step);  // the next step must not wait for ids that never come
    return make_actor_error(static_cast<int>(code), std::string("forward failed: ") + what);
  };
  try {
    SampledIds previous;
    if (st.previous_step != 0) {
      ScopedSpan span(st.context.tracer.get(), "wait_ids", "executor", step, 0);
      previous = st.context.feedback->wait(st.previous_step, st.context.timeouts.step);
    }
    st.previous_step = step;
    ScopedSpan span(st.context.tracer.get(), "execute", "executor", step, work.batch.num_tokens());
    double start = now_s();
    logits = st.executor->execute(work.batch, previous);
    work.sample.forward_s = now_s() - start;
  } catch (const Error& e) {
    return fail(e.code(), e.what());
  } catch (const std::exception& e) {
    return fail(ErrorCode::internal, e.what());
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
