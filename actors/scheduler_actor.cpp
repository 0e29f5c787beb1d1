// The scheduler actor: owns the Scheduler and the KV allocator and drives the
// step loop:
//
//   plan = schedule() ─execute─▶ executor ─sample─▶ sampler ─StepResult─▶
//   update_from_output() ─▶ plan the next step at once, THEN hand the step's
//   tokens to the detokenizer (which works while the next step computes).
//
// With scheduler.overlap, two steps are in flight: as soon as step t is
// sent, step t+1 is planned ahead (Scheduler::schedule_ahead) and sent too,
// its decode rows taking step t's ids on the executor's side
// (actors/step_feedback.hpp). So the executor finds step t+1 waiting when
// step t's sampling is done, and the scheduler's update and planning run
// while the device computes. Results are applied strictly in step order.
//
// With a pipelined executor (Executor::max_steps_in_flight() = P > 1), up to
// P steps of disjoint sequences are in flight instead (the Scheduler plans
// each beside the others), so every stage of the pipeline has a step; when
// nothing more can be planned, the executor is asked for the oldest step's
// logits (flush_atom).
//
// Cancels, stop-string hits and refusals are applied between steps by the
// Scheduler's own rules (KV freed by them is reused only by a later plan,
// which runs after every step already sent).
#include <spdlog/spdlog.h>

#include <deque>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "actors/pipeline.hpp"
#include "core/error.hpp"

namespace llmk {

namespace {

struct SchedulerActorState {
  SchedulerActorState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::shared_ptr<SchedulerParts> parts;
  executor_actor executor;
  detokenizer_actor detokenizer;
  PipelineContext context;
  // A step sent to the executor, and its outcome once it arrives (applied in step order).
  struct InFlight {
    StepPlan plan;
    std::vector<uint64_t> releases;  // sent with it; sent again if it fails
    std::optional<StepResult> result;
    std::optional<caf::error> error;
    bool arrived() const { return result.has_value() || error.has_value(); }
  };
  std::deque<InFlight> in_flight;  // oldest first; at most two, or the pipeline's stages
  uint64_t last_sent = 0, last_result = 0;  // step ids: the last sent, the last whose outcome arrived
  std::unordered_map<std::string, uint64_t> live;  // live request id -> its request key (Sequence::request_key)
  // The sampler's view of the requests (see SampleWork): keys it holds state
  // for, and keys to release with the next step.
  std::unordered_set<uint64_t> sampler_keys;
  std::vector<uint64_t> pending_releases;
  bool shutting_down = false;
  uint64_t embed_seqs = 0;  // embedding inputs so far (their KV sequence ids)
  static inline const char* name = "scheduler";

  Scheduler& scheduler() { return *parts->scheduler; }
  Tracer* tracer() { return context.tracer.get(); }
  void observe(const char* message, const std::string& id = {}, uint64_t step = 0) {
    if (context.tracer) context.tracer->observe("scheduler", message, id, step);
  }
};

using SchedulerPointer = scheduler_actor::stateful_pointer<SchedulerActorState>;

void maybe_schedule(SchedulerPointer self);

// Sends events to the detokenizer and applies the stop-string hits it answers with.
void send_tokens(SchedulerPointer self, uint64_t step, std::vector<SampleOutput> outputs) {
  if (outputs.empty()) return;
  auto& st = self->state;
  for (const auto& out : outputs) {
    if (!out.event.request_done) continue;
    auto it = st.live.find(out.event.request_id);
    if (it == st.live.end()) continue;
    if (st.sampler_keys.erase(it->second)) st.pending_releases.push_back(it->second);
    st.live.erase(it);
  }
  StepTokens tokens{step, std::move(outputs)};
  self->request(st.detokenizer, st.context.timeouts.message, tokens_atom::value, std::move(tokens))
      .then(
          [self](StopHits& hits) {
            if (hits.samples.empty()) return;
            self->state.observe("stop_hits");
            std::vector<SampleOutput> finals;
            for (const auto& ref : hits.samples) {
              try {
                for (auto& ev : self->state.scheduler().finish_request(ref.request_id, ref.index, FinishReason::stop))
                  finals.push_back(SampleOutput{std::move(ev), false, {}});
              } catch (const std::exception& e) {
                spdlog::error("scheduler: finishing {}[{}] failed: {}", ref.request_id, ref.index, e.what());
              }
            }
            send_tokens(self, 0, std::move(finals));
            maybe_schedule(self);  // the freed KV may admit a waiting request
          },
          [](caf::error& err) { spdlog::error("scheduler: the detokenizer did not take a step: {}", describe(err)); });
}

std::vector<SampleOutput> wrap(std::vector<TokenEvent> events) {
  std::vector<SampleOutput> out;
  out.reserve(events.size());
  for (auto& ev : events) out.push_back(SampleOutput{std::move(ev), false, {}});
  return out;
}

// The step's batch, and for the sampler only what changed: requests
// released since the last step, requests whose first logits row this is
// (with their parameters and, for the repetition penalty, prompt ids), and
// per row which sample it is for. O(rows) per step, whatever the lengths.
StepWork make_work(SchedulerActorState& st, const StepPlan& plan, std::vector<uint64_t>& releases) {
  StepWork work;
  work.batch = plan.batch;
  SampleWork& sample = work.sample;
  sample.step = plan.step_id;
  sample.released = std::move(st.pending_releases);
  st.pending_releases.clear();
  releases = sample.released;
  sample.rows.reserve(plan.logits.size());
  // Only a step planned ahead gains from ids picked by the executor (the
  // next one may already be waiting for them).
  sample.raw_argmax = st.parts->overlap && !plan.logits.empty();
  sample.keep_hidden = st.scheduler().reads_hidden_rows() && !plan.logits.empty();
  for (const auto& target : plan.logits) {
    sample.rows.push_back(SampleRow{target.request_key, target.sample_index, target.num_generated, target.draft_token,
                                    target.tree_parent, target.tree_token, target.draft_probs});
    sample.raw_argmax = sample.raw_argmax && target.sampling && chooses_raw_argmax(*target.sampling);
    if (!st.sampler_keys.insert(target.request_key).second) continue;
    SamplerOpen open;
    open.request_key = target.request_key;
    open.sampling = target.sampling;
    open.num_samples = target.sampling ? target.sampling->n : 1;
    if (target.sampling && target.sampling->repetition_penalty != 1.0f)
      if (const Sequence* seq = st.scheduler().sequence(target.seq_id))
        open.prompt_ids.assign(seq->tokens.begin(), seq->tokens.begin() + seq->num_prompt_tokens);
    // A handed-off request's first row follows a token generated elsewhere.
    if (target.num_generated > 0)
      if (const Sequence* seq = st.scheduler().sequence(target.seq_id))
        open.generated_ids.assign(seq->tokens.begin() + seq->num_prompt_tokens,
                                  seq->tokens.begin() + seq->num_prompt_tokens + target.num_generated);
    sample.opened.push_back(std::move(open));
  }
  return work;
}

// Step t's tokens: the Scheduler's update, then the next plan, then the
// detokenizer.
void on_step_done(SchedulerPointer self, StepPlan& plan, StepResult& result) {
  auto& st = self->state;
  st.observe("step_done", {}, plan.step_id);
  std::vector<TokenEvent> events;
  {
    ScopedSpan span(st.tracer(), "update", "scheduler", plan.step_id, plan.batch.num_seqs());
    std::vector<int32_t> sampled;
    sampled.reserve(result.tokens.size());
    for (const auto& t : result.tokens) sampled.push_back(t.token_id);
    try {
      events = st.scheduler().update_from_output(plan, sampled, &result.tokens, result.hidden);
    } catch (const std::exception& e) {
      spdlog::error("scheduler: step {} update failed: {}", plan.step_id, e.what());
      events = st.scheduler().fail_step(plan, std::string("internal error: ") + e.what());
    }
  }
  // Logprobs travel next to their token, from the row the Scheduler names.
  std::vector<SampleOutput> outputs;
  outputs.reserve(events.size());
  for (auto& ev : events) {
    SampleOutput out{std::move(ev), false, {}};
    const int32_t row = out.event.logits_row;
    if (out.event.token_id && row >= 0 && static_cast<size_t>(row) < result.tokens.size() &&
        result.tokens[static_cast<size_t>(row)].has_logprobs) {
      out.has_logprob = true;
      out.logprob = std::move(result.tokens[static_cast<size_t>(row)].logprobs);
    }
    outputs.push_back(std::move(out));
  }
  maybe_schedule(self);  // the next step starts before this one is detokenized
  send_tokens(self, plan.step_id, std::move(outputs));
}

void on_step_failed(SchedulerPointer self, StepPlan& plan, std::vector<uint64_t>& releases, const caf::error& err) {
  auto& st = self->state;
  // The sampler may not have seen the step: release its keys again (a
  // release of an unknown key is a no-op).
  st.pending_releases.insert(st.pending_releases.end(), releases.begin(), releases.end());
  std::string why = "step " + std::to_string(plan.step_id) + " failed: " + describe(err);
  spdlog::error("scheduler: {}", why);
  auto events = st.scheduler().fail_step(plan, why, error_code_of(err));
  maybe_schedule(self);
  send_tokens(self, plan.step_id, wrap(std::move(events)));
}

// Applies the outcomes that have arrived, oldest step first.
void drain(SchedulerPointer self) {
  auto& st = self->state;
  while (!st.in_flight.empty() && st.in_flight.front().arrived()) {
    SchedulerActorState::InFlight done = std::move(st.in_flight.front());
    st.in_flight.pop_front();
    if (done.result) on_step_done(self, done.plan, *done.result);
    else on_step_failed(self, done.plan, done.releases, *done.error);
  }
}

void send_step(SchedulerPointer self, StepPlan plan) {
  auto& st = self->state;
  st.observe("schedule", {}, plan.step_id);
  SchedulerActorState::InFlight entry;
  StepWork work = make_work(st, plan, entry.releases);
  if (!plan.batch.fed_back.empty() && !st.in_flight.empty()) work.sample.fed_from = st.in_flight.back().plan.step_id;
  const uint64_t step = plan.step_id;
  entry.plan = std::move(plan);
  st.in_flight.push_back(std::move(entry));
  auto find = [self](uint64_t id) -> SchedulerActorState::InFlight* {
    for (auto& f : self->state.in_flight)
      if (f.plan.step_id == id) return &f;
    return nullptr;
  };
  st.last_sent = step;
  self->request(st.executor, st.context.timeouts.step, execute_atom::value, std::move(work))
      .then(
          [self, step, find](StepResult& result) {
            self->state.last_result = std::max(self->state.last_result, step);
            if (auto* f = find(step)) f->result = std::move(result);
            drain(self);
          },
          [self, step, find](caf::error& err) {
            self->state.last_result = std::max(self->state.last_result, step);
            if (auto* f = find(step)) f->error = std::move(err);
            drain(self);
          });
}

// Pipelined: plans steps beside those in flight while the Scheduler can,
// then, with steps in flight and nothing more to start, asks the executor
// for the oldest one's logits.
void fill_pipeline(SchedulerPointer self) {
  auto& st = self->state;
  const int32_t depth = st.scheduler().max_steps_in_flight();
  while (static_cast<int32_t>(st.in_flight.size()) < depth) {
    StepPlan plan;
    {
      ScopedSpan span(st.tracer(), "schedule", "scheduler", 0);
      try {
        plan = st.scheduler().schedule();
      } catch (const std::exception& e) {
        spdlog::error("scheduler: schedule() failed: {}", e.what());
      }
      span.set_count(plan.batch.num_seqs());
    }
    send_tokens(self, 0, wrap(std::move(plan.events)));  // sequences that can never fit
    plan.events.clear();
    if (plan.empty()) break;
    send_step(self, std::move(plan));
  }
  if (!st.in_flight.empty()) self->send(st.executor, flush_atom::value, st.last_sent, st.last_result);
}

// Plans and sends steps: a full schedule() when nothing is in flight, then
// (scheduler.overlap) one step ahead of the step in flight.
void maybe_schedule(SchedulerPointer self) {
  auto& st = self->state;
  if (st.shutting_down) return;
  if (st.parts->pipelined) {
    fill_pipeline(self);
    return;
  }
  if (st.in_flight.empty()) {
    StepPlan plan;
    std::vector<TokenEvent> refused;
    {
      ScopedSpan span(st.tracer(), "schedule", "scheduler", 0);
      try {
        plan = st.scheduler().schedule();
      } catch (const std::exception& e) {
        spdlog::error("scheduler: schedule() failed: {}", e.what());
      }
      refused = std::move(plan.events);  // sequences that can never fit
      plan.events.clear();
      span.set_count(plan.batch.num_seqs());
    }
    send_tokens(self, 0, wrap(std::move(refused)));
    if (plan.empty()) return;
    send_step(self, std::move(plan));
  }
  if (st.in_flight.size() != 1 || !st.parts->overlap) return;
  StepPlan ahead;
  {
    ScopedSpan span(st.tracer(), "schedule_ahead", "scheduler", 0);
    try {
      ahead = st.scheduler().schedule_ahead(st.in_flight.back().plan);
    } catch (const std::exception& e) {
      spdlog::error("scheduler: schedule_ahead() failed: {}", e.what());
      return;
    }
    span.set_count(ahead.batch.num_seqs());
  }
  send_tokens(self, 0, wrap(std::move(ahead.events)));  // none expected: refusals wait for a full plan
  ahead.events.clear();
  if (!ahead.empty()) send_step(self, std::move(ahead));
}

caf::result<bool> enqueue(SchedulerPointer self, TokenizedRequest& req) {
  auto& st = self->state;
  st.observe("enqueue", req.request.id);
  if (st.shutting_down)
    return make_actor_error(static_cast<int>(ErrorCode::cancelled), "the engine is shutting down");
  try {
    st.scheduler().add_request(req.request.id, req.prompt_ids, req.request.sampling, req.request.strict_context,
                               SequenceHandoff{req.request.kv_export_key, req.request.kv_import});
  } catch (const FieldError& e) {
    return make_actor_error(static_cast<int>(e.code()), e.what(), e.field());
  } catch (const Error& e) {
    return make_actor_error(static_cast<int>(e.code()), e.what());
  } catch (const std::exception& e) {
    return make_actor_error(static_cast<int>(ErrorCode::internal), e.what());
  }
  const SamplingParams& s = req.request.sampling;
  // The Scheduler resolved the seed into the sequence's parameters; the
  // sampler gets them with the request's first logits row.
  st.live[req.request.id] = st.scheduler().sample(req.request.id, 0)->request_key;
  DetokenizerOpen open{req.request.id, req.sink, s.n, s.stop, std::move(req.prompt_ids)};
  self->send(st.detokenizer, open_atom::value, std::move(open));
  maybe_schedule(self);
  return true;
}

EngineStats engine_stats(const SchedulerStats& s) {
  EngineStats e;
  e.num_running = s.num_running;
  e.num_waiting = s.num_waiting;
  e.num_requests_total = s.num_requests_total;
  e.num_requests_finished = s.num_requests_finished;
  e.num_prompt_tokens = s.num_prompt_tokens;
  e.num_prefill_tokens = s.num_prefill_tokens;
  e.num_generated_tokens = s.num_generated_tokens;
  e.num_preemptions = s.num_preemptions;
  e.num_steps = s.num_steps;
  e.mean_batch_seqs = s.mean_batch_seqs();
  e.mean_batch_tokens = s.mean_batch_tokens();
  e.kv = s.kv;
  e.peak_running = s.peak_running;
  e.peak_steps_in_flight = s.peak_steps_in_flight;
  e.num_handoffs_exported = s.num_handoffs_exported;
  e.num_handoffs_imported = s.num_handoffs_imported;
  e.num_spec_drafts = s.num_spec_drafts;
  e.num_spec_draft_tokens = s.num_spec_draft_tokens;
  e.num_spec_accepted_tokens = s.num_spec_accepted_tokens;
  return e;
}

// Embeddings (actors/messages.hpp): the input gets KV of its own, as a
// sequence the Scheduler never sees (ids from the top half of the range, no
// prefix-cache lookup, nothing committed), and its prefill chunks go to the
// executor as one message behind the steps already sent. Freed when the
// executor answers: every step sent later runs after the embedding, so it
// never meets these slots in use.
caf::result<EmbedResult> embed(SchedulerPointer self, EmbedJob& job) {
  auto& st = self->state;
  st.observe("embed");
  auto promise = self->make_response_promise<EmbedResult>();
  const auto n = static_cast<int32_t>(job.token_ids.size());
  if (n == 0 || job.chunk_tokens <= 0) {
    promise.deliver(make_actor_error(static_cast<int>(ErrorCode::invalid_argument),
                                     "embeddings: an input needs at least one token"));
    return promise;
  }
  KvAllocator& kv = *st.parts->kv;
  const uint64_t seq_id = (uint64_t{1} << 63) + ++st.embed_seqs;
  EmbedWork work;
  work.params = job.params;
  try {
    llmk_kv_reserve_args args{seq_id, nullptr, static_cast<uint32_t>(n), static_cast<uint32_t>(n)};
    if (!kv.reserve(args, nullptr)) {
      promise.deliver(make_actor_error(static_cast<int>(ErrorCode::overloaded),
                                       "embeddings: no KV memory free for an input of " + std::to_string(n) +
                                           " tokens; retry later"));
      return promise;
    }
    std::vector<int32_t> table;
    kv.block_table(seq_id, table);
    const auto block = static_cast<int32_t>(kv.block_size());
    for (int32_t begin = 0; begin < n; begin += job.chunk_tokens) {
      const int32_t end = std::min(n, begin + job.chunk_tokens);
      StepBatch b;
      b.query_start = {0, end - begin};
      b.context_lens = {end};
      b.block_tables = table;
      b.max_blocks_per_seq = static_cast<int32_t>(table.size());
      b.block_size = block;
      for (int32_t p = begin; p < end; ++p) {
        b.token_ids.push_back(job.token_ids[static_cast<size_t>(p)]);
        b.positions.push_back(p);
        b.slot_mapping.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
        if (job.params.pooling == Pooling::mean || p == n - 1) b.logits_rows.push_back(p - begin);
      }
      work.chunks.push_back(std::move(b));
    }
  } catch (const Error& e) {
    kv.free_seq(seq_id);
    promise.deliver(make_actor_error(static_cast<int>(e.code()), std::string("embeddings: ") + e.what()));
    return promise;
  }
  // The steps already queued at the executor (two at most) run first. A
  // timeout frees the KV early, still safely: whatever uses it later is
  // queued behind these chunks.
  const auto timeout = st.context.timeouts.step * static_cast<int64_t>(work.chunks.size() + 2);
  self->request(st.executor, timeout, embed_atom::value, std::move(work))
      .then(
          [self, promise, seq_id](EmbedResult& result) mutable {
            self->state.parts->kv->free_seq(seq_id);
            promise.deliver(std::move(result));
          },
          [self, promise, seq_id](caf::error& err) mutable {
            self->state.parts->kv->free_seq(seq_id);
            promise.deliver(std::move(err));
          });
  return promise;
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& system, std::shared_ptr<SchedulerParts> parts,
                                executor_actor executor, detokenizer_actor detokenizer, PipelineContext context) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn(
      [](SchedulerPointer self, std::shared_ptr<SchedulerParts> parts, executor_actor executor,
         detokenizer_actor detokenizer, PipelineContext context) -> scheduler_actor::behavior_type {
    auto& st = self->state;
    st.parts = parts;
    st.executor = executor;
    st.detokenizer = detokenizer;
    st.context = context;
    return {
        [self](enqueue_atom, TokenizedRequest& req) -> caf::result<bool> { return enqueue(self, req); },
        [self](cancel_atom, std::string& id) {
          self->state.observe("cancel", id);
          auto events = self->state.scheduler().abort_request(id);
          send_tokens(self, 0, wrap(std::move(events)));
          maybe_schedule(self);
        },
        [self](stats_atom) { return engine_stats(self->state.scheduler().stats()); },
        // Safe between any two messages: live sequences, those of steps in
        // flight included, hold their blocks, and only unheld ones are dropped.
        [self](embed_atom, EmbedJob& job) -> caf::result<EmbedResult> { return embed(self, job); },
        [self](flush_cache_atom) -> caf::result<uint32_t> {
          self->state.observe("flush_cache");
          try {
            const uint32_t num_dropped = self->state.parts->kv->flush_cache();
            spdlog::info("scheduler: prefix cache flushed, {} blocks dropped", num_dropped);
            return num_dropped;
          } catch (const Error& e) {
            return make_actor_error(static_cast<int>(e.code()), std::string("flush_cache: ") + e.what());
          }
        },
        // Cancels everything live, then lets the detokenizer answer once it
        // has sent the cancelled events (it receives them first: same sender).
        [self](shutdown_atom) -> caf::delegated<bool> {
          auto& st = self->state;
          st.observe("shutdown");
          st.shutting_down = true;
          std::vector<std::string> live;
          for (const auto& [id, key] : st.live) live.push_back(id);
          std::vector<TokenEvent> events;
          for (const auto& id : live)
            for (auto& ev : st.scheduler().abort_request(id)) events.push_back(std::move(ev));
          send_tokens(self, 0, wrap(std::move(events)));
          return self->delegate(st.detokenizer, shutdown_atom::value);
        },
    };
  }, std::move(parts), std::move(executor), std::move(detokenizer), std::move(context));
}

}  // namespace llmk
