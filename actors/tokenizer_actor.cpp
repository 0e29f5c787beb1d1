// The tokenizer actor: turns text prompts and chats into token ids and hands
// them to the scheduler. Runs while the executor computes, so tokenizing a
// new prompt never delays a step. It decides nothing about admission: the
// scheduler alone checks lengths, sampling values and the queue, and its
// refusal reaches the request's sink as an error event.
#include <spdlog/spdlog.h>

#include "actors/pipeline.hpp"
#include "core/chat_template.hpp"
#include "core/error.hpp"
#include "core/grammar.hpp"
#include "core/tokenizer.hpp"

namespace llmk {

namespace {

struct TokenizerState {
  TokenizerState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  PromptEncoding encoding;
  std::unique_ptr<GrammarCompiler> grammar_compiler;  // made at the first structured request
  scheduler_actor scheduler;
  PipelineContext context;
  bool shutting_down = false;
  static inline const char* name = "tokenizer";
};

using TokenizerPointer = tokenizer_actor::stateful_pointer<TokenizerState>;

// The model's prompt ids for a request. Throws Error for a chat the template
// refuses (or when there is no template) and for an empty prompt.
std::vector<int32_t> prompt_ids_of(const PromptEncoding& enc, const Request& request) {
  if (request.chat) {
    if (!enc.chat_template) throw Error(ErrorCode::unsupported, enc.chat_template_error);
    return enc.chat_template->encode(request.chat->messages, request.chat->options, *enc.tokenizer,
                                     enc.add_bos_token);
  }
  if (!request.prompt_token_ids.empty()) return request.prompt_token_ids;
  // Checked before encoding, which would turn "" into a lone BOS.
  if (request.prompt.empty()) throw Error(ErrorCode::invalid_argument, "the prompt is empty");
  return enc.tokenizer->encode(request.prompt, request.add_bos && enc.add_bos_token);
}

// A structured request's grammar, compiled over the model's vocabulary
// (cached by text). It may speculate: the sampler masks each verification
// row (drafts in a chain, not trees). Throws FieldError naming the
// request field for a grammar XGrammar refuses, Error(unsupported) where
// structured outputs are not served.
void compile_structured(TokenizerState& st, SamplingParams& sampling) {
  if (!st.encoding.structured_refusal.empty())
    throw FieldError(sampling.structured->field, sampling.structured->field + ": " + st.encoding.structured_refusal,
                     ErrorCode::unsupported);
  if (!st.grammar_compiler)
    st.grammar_compiler = std::make_unique<GrammarCompiler>(*st.encoding.tokenizer, st.encoding.tokenizer->vocab_size(),
                                                            st.encoding.eos_ids);
  auto structured = std::make_shared<StructuredOutput>(*sampling.structured);
  structured->compiled = st.grammar_compiler->compile(*structured);
  sampling.structured = std::move(structured);
}

void submit(TokenizerPointer self, Request& request, caf::actor& sink) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("tokenizer", "submit", request.id);
  ScopedSpan span(st.context.tracer.get(), "tokenize", "tokenizer", 0, 1);
  if (st.shutting_down) {
    caf::anon_send(sink, make_error_event(request.id, "the engine is shutting down", ErrorCode::overloaded));
    return;
  }
  std::vector<int32_t> ids;
  try {
    ids = prompt_ids_of(st.encoding, request);
    if (request.sampling.structured) compile_structured(st, request.sampling);
  } catch (const FieldError& e) {
    caf::anon_send(sink, make_error_event(request.id, e.what(), e.code(), e.field()));
    return;
  } catch (const Error& e) {
    caf::anon_send(sink, make_error_event(request.id, e.what(), e.code()));
    return;
  } catch (const std::exception& e) {
    caf::anon_send(sink, make_error_event(request.id, std::string("cannot tokenize the prompt: ") + e.what(),
                                          ErrorCode::invalid_argument));
    return;
  }
  std::string id = request.id;
  TokenizedRequest tokenized{std::move(request), std::move(ids), sink};
  self->request(st.scheduler, st.context.timeouts.message, enqueue_atom::value, std::move(tokenized))
      .then([](bool) {},
            [sink, id](caf::error& err) {
              // Refused by the scheduler (length, sampling values, queue full,
              // duplicate id, shutting down) or no answer.
              caf::anon_send(sink, make_error_event(id, describe(err), error_code_of(err), field_of(err)));
            });
}

}  // namespace

tokenizer_actor spawn_tokenizer(caf::actor_system& system, PromptEncoding encoding, scheduler_actor scheduler,
                                PipelineContext context) {
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn(
      [](TokenizerPointer self, PromptEncoding encoding, scheduler_actor scheduler,
         PipelineContext context) -> tokenizer_actor::behavior_type {
    self->state.encoding = std::move(encoding);
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
  }, std::move(encoding), std::move(scheduler), std::move(context));
}

}  // namespace llmk
