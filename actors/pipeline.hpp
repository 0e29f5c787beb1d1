// Spawning the five actors. Engine wires them; a program that builds its own
// pipeline (or a test) can call these directly.
//
// Threads: the executor and the sampler are detached actors, a thread each
// (a forward blocks for milliseconds on its own OpenMP team; sampling a
// large batch takes milliseconds too); the tokenizer, scheduler and
// detokenizer run on the actor system's shared worker threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/step_feedback.hpp"
#include "actors/trace.hpp"
#include "core/engine_parts.hpp"

namespace llmk {

class ChatTemplate;
class Executor;
class Sampler;
class Tokenizer;

// Every request between actors has one of these timeouts.
struct PipelineTimeouts {
  std::chrono::milliseconds step{120000};    // scheduler → executor → sampler, one step
  std::chrono::milliseconds message{10000};  // every other request (enqueue, tokens, shutdown)
};

struct PipelineContext {
  std::shared_ptr<Tracer> tracer;  // may be null
  PipelineTimeouts timeouts;
  // Sampler → executor: each step's ids (actors/step_feedback.hpp). Every
  // copy of a context shares the one made with it.
  std::shared_ptr<StepFeedback> feedback = std::make_shared<StepFeedback>();
};

// How the tokenizer actor turns a request into prompt ids. Admission (lengths,
// sampling values, the queue) is the scheduler's alone.
struct PromptEncoding {
  std::shared_ptr<const Tokenizer> tokenizer;
  bool add_bos_token = true;  // the model's tokenizer_config: text prompts get BOS when the request asks too
  std::shared_ptr<const ChatTemplate> chat_template;  // null: chat requests are refused with ...
  std::string chat_template_error;                    // ... this reason
  // Structured outputs (core/grammar.hpp): the model's end-of-sequence ids,
  // which end a text once its grammar is complete, and why such requests
  // are refused ("" when they are served).
  std::vector<int32_t> eos_ids;
  std::string structured_refusal;
};

sampler_actor spawn_sampler(caf::actor_system& system, PipelineContext context);

// The executor actor holds the Executor (core/executor.hpp); the scheduler
// may hold it too, as its KvOffloader. num_sampleable_tokens: the logits
// columns that are tokens (the tokenizer's size where the model's vocabulary
// is padded past it); the columns after them are never sampled nor listed
// as logprobs. 0: every column.
executor_actor spawn_executor(caf::actor_system& system, std::shared_ptr<Executor> executor, sampler_actor sampler,
                              PipelineContext context, int32_t num_sampleable_tokens);

detokenizer_actor spawn_detokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer,
                                    PipelineContext context);

// The scheduler actor owns the KV allocator and the Scheduler built over it
// (core/engine_parts.hpp: SchedulerParts).
scheduler_actor spawn_scheduler(caf::actor_system& system, std::shared_ptr<SchedulerParts> parts,
                                executor_actor executor, detokenizer_actor detokenizer, PipelineContext context);

tokenizer_actor spawn_tokenizer(caf::actor_system& system, PromptEncoding encoding, scheduler_actor scheduler,
                                PipelineContext context);

// A request's one and only event when it is refused or fails; `code` lets the
// front ends answer with the right status (400, 503, 500...).
// `field` names the request field at fault (a FieldError's), "" when none.
RequestEvent make_error_event(const std::string& request_id, const std::string& message,
                              ErrorCode code = ErrorCode::internal, std::string field = {});

}  // namespace llmk
