// The detokenizer actor: turns each sample's tokens into text deltas (one
// IncrementalDetokenizer and one StopStringMatcher per sample), sends the
// client its events, and tells the scheduler which samples hit a stop string.
// It works on step t while the executor computes step t+1.
//
// A stop string ends a sample's text at once: the text before the match goes
// out, everything after is dropped, and the sample's final event follows as
// soon as the scheduler has freed it (its usage counts the tokens up to the
// match, not the ones the scheduler generated meanwhile).
#include <spdlog/spdlog.h>

#include <optional>
#include <unordered_map>

#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/stop_matcher.hpp"
#include "core/tokenizer.hpp"

namespace llmk {

namespace {

struct SampleState {
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopStringMatcher> matcher;  // null without stop strings
  int32_t num_tokens = 0;  // tokens taken (up to and including a stop-string match)
  bool stopped = false;    // a stop string matched; waiting for the scheduler's final event
  bool finished = false;
};

struct RequestState {
  caf::actor sink;
  std::vector<SampleState> samples;
  int32_t num_finished = 0;
};

struct DetokenizerState {
  DetokenizerState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::shared_ptr<const Tokenizer> tokenizer;
  PipelineContext context;
  std::unordered_map<std::string, RequestState> requests;
  static inline const char* name = "detokenizer";
};

using DetokenizerPointer = detokenizer_actor::stateful_pointer<DetokenizerState>;

void open(DetokenizerPointer self, DetokenizerOpen& o) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("detokenizer", "open", o.request_id);
  RequestState rs;
  rs.sink = o.sink;
  rs.samples.resize(static_cast<size_t>(std::max(o.n, 1)));
  for (auto& sample : rs.samples) {
    sample.detokenizer = std::make_unique<IncrementalDetokenizer>(*st.tokenizer, std::span<const int32_t>(o.prompt_ids));
    if (!o.stop.empty()) sample.matcher = std::make_unique<StopStringMatcher>(o.stop);
  }
  st.requests[o.request_id] = std::move(rs);
}

// Text through the stop matcher; sets sample.stopped on a match.
std::string filter(SampleState& sample, const std::string& text) {
  if (!sample.matcher) return text;
  auto r = sample.matcher->push(text);
  if (r.stopped) sample.stopped = true;
  return std::move(r.text);
}

// Handles one output; returns true when the sample just hit a stop string
// (and is not finished by this output already).
bool take(DetokenizerPointer self, SampleOutput& out) {
  auto& st = self->state;
  TokenEvent& ev = out.event;
  auto it = st.requests.find(ev.request_id);
  if (it == st.requests.end()) return false;  // already closed
  RequestState& rs = it->second;
  if (ev.index < 0 || ev.index >= static_cast<int32_t>(rs.samples.size())) return false;
  SampleState& sample = rs.samples[static_cast<size_t>(ev.index)];
  if (sample.finished) return false;

  RequestEvent event;
  event.request_id = ev.request_id;
  event.index = ev.index;
  bool hit = false;
  if (!sample.stopped) {
    if (ev.token_id) {
      ++sample.num_tokens;
      event.token_ids.push_back(*ev.token_id);
      if (out.has_logprob) event.logprobs.push_back(std::move(out.logprob));
      if (!ev.is_stop_token) {
        try {
          event.text_delta = filter(sample, sample.detokenizer->push(*ev.token_id));
        } catch (const std::exception& e) {
          spdlog::error("detokenizer: {}[{}]: {}", ev.request_id, ev.index, e.what());
        }
      }
      hit = sample.stopped;
    }
    if (ev.finished && !sample.stopped) {
      event.text_delta += filter(sample, sample.detokenizer->flush());
      if (sample.matcher && !sample.stopped) event.text_delta += sample.matcher->flush();
      hit = hit || sample.stopped;
    }
  } else if (!ev.finished) {
    return false;  // generated after the stop string: dropped
  }

  if (ev.finished) {
    event.finished = true;
    event.finish_reason = sample.stopped ? FinishReason::stop : ev.finish_reason;
    event.error = sample.stopped ? std::string() : ev.error;
    if (ev.finish_reason == FinishReason::error) event.error_code = ev.error_code;
    event.usage = ev.usage;
    event.timings = ev.timings;
    event.beam = ev.beam;
    if (sample.stopped) {
      // Count only what the client saw: tokens up to the match.
      event.usage.completion_tokens = sample.num_tokens;
      if (event.timings.token_times_s.size() > static_cast<size_t>(sample.num_tokens))
        event.timings.token_times_s.resize(static_cast<size_t>(sample.num_tokens));
    }
    sample.finished = true;
    event.request_done = ++rs.num_finished == static_cast<int32_t>(rs.samples.size());
  }
  if (event.finished || !event.token_ids.empty() || !event.text_delta.empty()) {
    if (st.context.tracer) st.context.tracer->observe("detokenizer", "event", ev.request_id);
    caf::anon_send(rs.sink, std::move(event));
  }
  bool done = rs.num_finished == static_cast<int32_t>(rs.samples.size());
  if (done) st.requests.erase(it);
  return hit && !ev.finished;
}

StopHits tokens(DetokenizerPointer self, StepTokens& step) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("detokenizer", "tokens", {}, step.step);
  ScopedSpan span(st.context.tracer.get(), "detokenize", "detokenizer", step.step,
                  static_cast<int64_t>(step.outputs.size()));
  StopHits hits;
  for (auto& out : step.outputs) {
    SampleRef ref{out.event.request_id, out.event.index};
    if (take(self, out)) hits.samples.push_back(std::move(ref));
  }
  return hits;
}

// Ends whatever is still open (the scheduler cancelled everything before).
bool shutdown(DetokenizerPointer self) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("detokenizer", "shutdown");
  for (auto& [id, rs] : st.requests) {
    for (size_t i = 0; i < rs.samples.size(); ++i) {
      if (rs.samples[i].finished) continue;
      RequestEvent event;
      event.request_id = id;
      event.index = static_cast<int32_t>(i);
      event.finished = true;
      event.finish_reason = FinishReason::cancelled;
      event.error = "the engine shut down";
      event.request_done = ++rs.num_finished == static_cast<int32_t>(rs.samples.size());
      caf::anon_send(rs.sink, std::move(event));
    }
  }
  st.requests.clear();
  return true;
}

}  // namespace

detokenizer_actor spawn_detokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer,
                                    PipelineContext context) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn(
      [](DetokenizerPointer self, std::shared_ptr<const Tokenizer> tokenizer,
         PipelineContext context) -> detokenizer_actor::behavior_type {
    self->state.tokenizer = tokenizer;
    self->state.context = context;
    return {
        [self](open_atom, DetokenizerOpen& o) {
          try {
            open(self, o);
          } catch (const std::exception& e) {
            caf::anon_send(o.sink, make_error_event(o.request_id, e.what()));
          }
        },
        [self](tokens_atom, StepTokens& step) { return tokens(self, step); },
        [self](shutdown_atom) { return shutdown(self); },
    };
  }, std::move(tokenizer), std::move(context));
}

}  // namespace llmk
