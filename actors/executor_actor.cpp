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
//
// A pipelined executor (Executor::max_steps_in_flight() > 1, pipeline
// parallelism) keeps several steps in flight: the actor starts each step
// (Executor::start_step) and answers it later, when its logits come back,
// delegating to the sampler through the step's response promise. Logits
// come back while a later step starts (the pipeline full), or when the
// scheduler has nothing to start and asks for them (flush_atom). Such steps
// carry no fed-back rows (the scheduler plans them disjoint instead).
#include <algorithm>
#include <deque>

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
  // Pipelined: the steps started whose logits have not come back, oldest
  // first; the steps whose views went to the sampler (the oldest view is
  // overwritten once views_kept() later ones exist); the last step started
  // and the last one handed to the sampler (a flush names what the
  // scheduler had seen when it asked).
  struct Started {
    uint64_t step = 0;
    SampleWork sample;
    caf::typed_response_promise<StepResult> promise;
  };
  std::deque<Started> started;
  std::deque<uint64_t> handed_views;
  uint64_t last_started = 0, last_handed = 0;
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
    if (work.sample.keep_hidden && logits.num_rows > 0) {
      const auto h = static_cast<size_t>(st.executor->model_config().hidden_size);
      work.sample.hidden.resize(static_cast<size_t>(logits.num_rows) * h);
      if (!st.executor->copy_hidden_rows(logits.num_rows, work.sample.hidden.data())) work.sample.hidden.clear();
    }
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

// Pipelined: hands the oldest started step's logits to the sampler, which
// answers the scheduler through the step's promise.
void hand_oldest(ExecutorPointer self, LogitsView logits) {
  auto& st = self->state;
  ExecutorState::Started s = std::move(st.started.front());
  st.started.pop_front();
  if (st.num_sampleable > 0 && logits.vocab_size > st.num_sampleable) logits.vocab_size = st.num_sampleable;
  st.handed_views.push_back(s.step);
  st.last_handed = s.step;
  s.promise.delegate(st.sampler, sample_atom::value, std::move(s.sample), logits);
}

// Pipelined: before a call that may return a view, the sampler must be done
// with the view it overwrites.
void make_room(ExecutorPointer self) {
  auto& st = self->state;
  const auto kept = static_cast<size_t>(st.executor->views_kept());
  while (st.handed_views.size() >= kept) {
    st.context.feedback->wait_sampled(st.handed_views.front(), st.context.timeouts.step);
    st.handed_views.pop_front();
  }
}

// Pipelined: the job failed (a lost peer); no started step's logits will come.
void fail_started(ExecutorPointer self, ErrorCode code, const std::string& what) {
  auto& st = self->state;
  while (!st.started.empty()) {
    st.started.front().promise.deliver(
        make_actor_error(static_cast<int>(code), "forward failed: " + what));
    st.started.pop_front();
  }
}

caf::result<StepResult> start(ExecutorPointer self, StepWork& work) {
  auto& st = self->state;
  const uint64_t step = work.sample.step;
  if (st.context.tracer) st.context.tracer->observe("executor", "start", {}, step);
  auto promise = self->make_response_promise<StepResult>();
  st.last_started = step;  // even if it fails: the scheduler counts it sent
  try {
    make_room(self);
    std::optional<LogitsView> oldest;
    {
      ScopedSpan span(st.context.tracer.get(), "execute", "executor", step, work.batch.num_tokens());
      const double begin = now_s();
      oldest = st.executor->start_step(work.batch);
      work.sample.forward_s = now_s() - begin;
    }
    st.started.push_back(ExecutorState::Started{step, std::move(work.sample), promise});
    if (oldest) hand_oldest(self, *oldest);
  } catch (const Error& e) {
    promise.deliver(make_actor_error(static_cast<int>(e.code()), std::string("forward failed: ") + e.what()));
    if (e.code() == ErrorCode::peer_lost) fail_started(self, e.code(), e.what());
  } catch (const std::exception& e) {
    promise.deliver(make_actor_error(static_cast<int>(ErrorCode::internal), std::string("forward failed: ") + e.what()));
  }
  return promise;
}

// Pipelined: the scheduler, having sent up to `last_sent` and seen results
// up to `last_result`, has nothing more to start. Unless a later step came or
// a result is on its way to it (then it will start or ask again), the
// oldest step's logits are taken now.
void flush(ExecutorPointer self, uint64_t last_sent, uint64_t last_result) {
  auto& st = self->state;
  if (st.started.empty() || st.last_started != last_sent || st.last_handed > last_result) return;
  const uint64_t step = st.started.front().step;
  try {
    make_room(self);
    ScopedSpan span(st.context.tracer.get(), "finish", "executor", step, 0);
    hand_oldest(self, st.executor->finish_oldest());
  } catch (const Error& e) {
    fail_started(self, e.code(), e.what());
  } catch (const std::exception& e) {
    fail_started(self, ErrorCode::internal, e.what());
  }
}

// Embeddings: the input's prefill chunks, back to back inside this one
// message (so between steps, never beside one), each chunk's rows pooled as
// they come. The logits views handed out stay untouched: the rows go to a
// buffer of their own.
caf::result<EmbedResult> embed(ExecutorPointer self, EmbedWork& work) {
  auto& st = self->state;
  try {
    const int32_t hidden_size = st.executor->model_config().hidden_size;
    validate_embedding_params(work.params, hidden_size);
    EmbeddingPooler pooler(hidden_size, work.params);
    std::vector<float> rows;
    for (const StepBatch& chunk : work.chunks) {
      ScopedSpan span(st.context.tracer.get(), "embed", "executor", 0, chunk.num_tokens());
      // Never empty: a chunk without rows to pool (last pooling's early chunks) still names an output.
      rows.resize(static_cast<size_t>(std::max(chunk.num_logits(), 1)) * static_cast<size_t>(hidden_size));
      st.executor->embed_rows(chunk, rows.data());
      if (chunk.num_logits() > 0) pooler.add(rows.data(), chunk.num_logits());
    }
    return EmbedResult{pooler.finish()};
  } catch (const Error& e) {
    return make_actor_error(static_cast<int>(e.code()), e.what());
  } catch (const std::exception& e) {
    return make_actor_error(static_cast<int>(ErrorCode::internal), std::string("embeddings: ") + e.what());
  }
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
        [self](execute_atom, StepWork& work) -> caf::result<StepResult> {
          if (self->state.executor->max_steps_in_flight() > 1) return start(self, work);
          return execute(self, work);
        },
        [self](flush_atom, uint64_t last_sent, uint64_t last_result) { flush(self, last_sent, last_result); },
        [self](embed_atom, EmbedWork& work) -> caf::result<EmbedResult> { return embed(self, work); },
    };
  }, std::move(executor), std::move(sampler), std::move(context), num_sampleable_tokens);
}

}  // namespace llmk
