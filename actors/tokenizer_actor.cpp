// The tokenizer actor: validates requests, turns text prompts into token ids
// and hands them to the scheduler. Runs while the executor computes, so
// tokenizing a new prompt never delays a step.
#include <spdlog/spdlog.h>

#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"

namespace llmk {

namespace {

struct TokenizerState {
  TokenizerState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::shared_ptr<const Tokenizer> tokenizer;
  RequestLimits limits;
  scheduler_actor scheduler;
  PipelineContext context;
  bool shutting_down = false;
  static inline const char* name = "tokenizer";
};

using TokenizerPointer = tokenizer_actor::stateful_pointer<TokenizerState>;

// Token ids for the model, or an error message.
std::vector<int32_t> prompt_ids_of(const TokenizerState& st, const Request& request, std::string& error) {
  if (!request.prompt_token_ids.empty()) {
    for (int32_t id : request.prompt_token_ids) {
      if (id < 0 || id >= st.limits.vocab_size) {
        error = "prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(st.limits.vocab_size) + ")";
        return {};
      }
    }
    return request.prompt_token_ids;
  }
  return st.tokenizer->encode(request.prompt, request.add_bos && st.limits.add_bos_token);
}

void submit(TokenizerPointer self, Request& request, caf::actor& sink) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("tokenizer", "submit", request.id);
  ScopedSpan span(st.context.tracer.get(), "tokenize", "tokenizer", 0, 1);
  std::string error = st.shutting_down ? "the engine is shutting down" : validate_request(request);
  ErrorCode code = st.shutting_down ? ErrorCode::overloaded : ErrorCode::invalid_argument;
  std::vector<int32_t> ids;
  if (error.empty()) {
    try {
      ids = prompt_ids_of(st, request, error);
    } catch (const std::exception& e) {
      error = std::string("cannot tokenize the prompt: ") + e.what();
    }
  }
  if (error.empty() && static_cast<int32_t>(ids.size()) >= st.limits.max_seq_len) {
    error = "the prompt has " + std::to_string(ids.size()) + " tokens; the context limit is " +
            std::to_string(st.limits.max_seq_len) + " and at least one token must be generated";
  }
  if (!error.empty()) {
    caf::anon_send(sink, make_error_event(request.id, error, code));
    return;
  }
  std::string id = request.id;
  TokenizedRequest tokenized{std::move(request), std::move(ids), sink};
  self->request(st.scheduler, st.context.timeouts.message, enqueue_atom::value, std::move(tokenized))
      .then([](bool) {},
            [self, sink, id](caf::error& err) {
              // Refused (queue full, duplicate id, shutting down) or no answer.
              caf::anon_send(sink, make_error_event(id, describe(err), error_code_of(err)));
            });
}

}  // namespace

tokenizer_actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer,
                                RequestLimits limits, scheduler_actor scheduler, PipelineContext context) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn(
      [](TokenizerPointer self, std::shared_ptr<const Tokenizer> tokenizer, RequestLimits limits,
         scheduler_actor scheduler, PipelineContext context) -> tokenizer_actor::behavior_type {
    self->state.tokenizer = tokenizer;
    self->state.limits = limits;
    self->state.scheduler = scheduler;
    self->state.context = context;
    return {
        [self](submit_atom, Request& request, caf::actor& sink) { submit(self, request, sink); },
        // Through the tokenizer so that a cancel never overtakes its request.
        [self](cancel_atom, std::string& id) {
          if (self->state.context.tracer) self->state.context.tracer->observe("tokenizer", "cancel", id);
          self->send(self->state.scheduler, cancel_atom::value, std::move(id));
        },
        [self](shutdown_atom) -> caf::delegated<bool> {
          self->state.shutting_down = true;
          return self->delegate(self->state.scheduler, shutdown_atom::value);
        },
    };
  }, std::move(tokenizer), limits, std::move(scheduler), std::move(context));
}

}  // namespace llmk
