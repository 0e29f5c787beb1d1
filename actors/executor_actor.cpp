// The executor actor: holds the Executor (core/executor.hpp) and runs one
// forward per step, then hands a view of the logits (which stay where the
// executor wrote them) to the sampler, whose answer goes straight back to
// the scheduler (delegation: the executor is free for the next step at once).
// Detached: it has its own thread, so a forward never blocks the other
// actors' workers.
//
// Before each forward the actor waits for the previous step's ids (a step
// planned ahead reads them for its fed-back rows) and, with an executor that
// keeps two views, until the sampler no longer reads the logits this
// forward overwrites (actors/step_feedback.hpp). With one step in flight
// both waits return at once: the ids came back before the step was even
// planned. A step whose rows all take the raw argmax is published here,
// from the executor's own argmax, when the executor keeps two views: the
// next forward then starts without waiting for the sampler.
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
  // The steps whose logits the last two execute() calls handed to the
  // sampler ([1] the latest; 0: that call failed or never was): with two
  // views, the next forward overwrites [0]'s.
  uint64_t handed[2] = {0, 0};
  std::vector<int32_t> ids;    // a step's ids from the executor's argmax
  int32_t num_sampleable = 0;  // logits columns the sampler may pick from (0: all)
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
    const bool two_views = st.executor->views_kept() >= 2;
    if (st.previous_step != 0) {
      ScopedSpan span(st.context.tracer.get(), "wait_ids", "executor", step, 0);
      previous = st.context.feedback->wait(st.previous_step, st.context.timeouts.step);
      // With one view this forward overwrites the previous step's logits,
      // and its ids being out means the sampler took them.
      if (two_views && st.handed[0] != 0) st.context.feedback->wait_sampled(st.handed[0], st.context.timeouts.step);
    }
    st.handed[0] = st.handed[1];
    st.handed[1] = 0;
    st.previous_step = step;
    {
      ScopedSpan span(st.context.tracer.get(), "execute", "executor", step, work.batch.num_tokens());
      double start = now_s();
      logits = st.executor->execute(work.batch, previous);
      work.sample.forward_s = now_s() - start;
    }
    // A padded vocabulary's columns past the tokenizer's tokens are cut off
    // the view here, once: neither the argmax below nor the sampler (its
    // draws, its logprob alternatives) ever sees them.
    if (st.num_sampleable > 0 && logits.vocab_size > st.num_sampleable) logits.vocab_size = st.num_sampleable;
    if (work.sample.raw_argmax && two_views && logits.num_rows > 0) {
      ScopedSpan span(st.context.tracer.get(), "argmax", "executor", step, logits.num_rows);
      st.ids.resize(static_cast<size_t>(logits.num_rows));
      if (st.executor->argmax_rows(logits, st.ids)) {
        SampledIds ids;
        ids.data = st.ids.data();
        ids.count = logits.num_rows;
        st.context.feedback->publish(step, ids);
        work.sample.published_ids = st.ids;
      }
    }
  } catch (const Error& e) {
    return fail(e.code(), e.what());
  } catch (const std::exception& e) {
    return fail(ErrorCode::internal, e.what());
  }
  st.handed[1] = step;
  return self->delegate(st.sampler, sample_atom::value, std::move(work.sample), logits);
}

}  // namespace

executor_actor spawn_executor(caf::actor_system& system, std::shared_ptr<Executor> executor, sampler_actor sampler,
                              PipelineContext context, int32_t num_sampleable_tokens) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn<caf::detached>(
      [](ExecutorPointer self, std::shared_ptr<Executor> executor, sampler_actor sampler, PipelineContext context,
         int32_t num_sampleable_tokens) -> executor_actor::behavior_type {
    self->state.executor = executor;
    self->state.num_sampleable = num_sampleable_tokens;
    self->state.sampler = sampler;
    self->state.context = context;
    return {
        [self](execute_atom, StepWork& work) -> caf::result<StepResult> { return execute(self, work); },
    };
  }, std::move(executor), std::move(sampler), std::move(context), num_sampleable_tokens);
}

}  // namespace llmk
