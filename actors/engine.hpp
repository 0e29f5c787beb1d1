// llmk::Engine: the embedding surface. Starts the five actors (tokenizer,
// scheduler, executor, sampler, detokenizer) from a config and lets a program
// submit requests and receive their events.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/trace.hpp"
#include "core/config.hpp"
#include "core/embedding.hpp"
#include "core/engine_stats.hpp"
#include "core/model_config.hpp"
#include "core/request.hpp"

namespace caf {
class actor_system;
class actor;
}  // namespace caf

namespace llmk {

class ChatTemplate;
class KvEventLog;
class KvHandoffBox;
class Tokenizer;

// Run-time options of an Engine that are not part of the served
// configuration (tracing, threads, timeouts).
struct EngineOptions {
  // Chrome trace JSON of per-step spans, written when the engine stops
  // ("" = none). Engine::write_trace writes one on demand.
  std::string trace_file;
  bool record_trace = false;  // keep spans in memory (implied by trace_file)
  // Sees every message each actor handles, in handling order (tests, debugging).
  std::function<void(const PipelineEvent&)> observer;
  // CAF worker threads for the tokenizer, scheduler, detokenizer and user
  // actors; the executor and the sampler have a thread each.
  int32_t num_actor_threads = 2;
  std::chrono::milliseconds step_timeout{120000};    // one forward + sampling
  std::chrono::milliseconds message_timeout{10000};  // every other request between actors
  // Where the KV allocator reports prefix-cache events (kv_events; a
  // publisher drains it); nullptr: not reported.
  std::shared_ptr<KvEventLog> kv_events;
};

class Engine {
 public:
  using EventCallback = std::function<void(const RequestEvent&)>;

  // Loads the model and plugins, starts the actors. Throws llmk::Error.
  explicit Engine(const EngineConfig& config, EngineOptions options = {});
  // Cancels what is in flight and stops the actors; never hangs.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Events arrive on an engine thread, in order per request. An invalid
  // request or a full queue is answered by one finished event with
  // finish_reason == error (and the reason), never an exception. A request
  // whose id is already live, or one submitted while the engine stops, is
  // answered that way at once, on the caller's thread.
  void submit(Request request, EventCallback on_event);
  std::unique_ptr<EventStream> submit(Request request);
  // Cancels a live request (its KV is freed at once); false if unknown.
  bool cancel(const std::string& request_id);
  EngineStats stats() const;
  // Drops every prefix-cache block no live sequence holds (running requests
  // keep theirs) and returns how many; 0 when the allocator has no prefix
  // cache. The removals reach kv_events. Throws Error when the scheduler
  // does not answer or the allocator fails.
  uint32_t flush_cache();
  // Prefill/decode disaggregation, prefill side (disaggregation.mode
  // prefill): where requests with a kv_export_key leave their prompt's K/V
  // and first token for a decode replica (ipc/kv_transfer.hpp serves it);
  // nullptr in the other modes.
  std::shared_ptr<KvHandoffBox> kv_handoffs() const;

  // Embeddings (core/embedding.hpp): one input's pooled final hidden state,
  // its prefill run on the executor between steps (the scheduler lends it
  // KV, freed at once, never cached; actors/messages.hpp, embed). Blocks
  // until done. Throws FieldError naming "input" (no tokens, more than the
  // context, an id outside the vocabulary) or "dimensions" (above the
  // hidden size), Error(overloaded) when no KV is free now,
  // Error(unsupported) from an executor without hidden states (CUDA).
  std::vector<float> embed(const std::vector<int32_t>& token_ids, const EmbeddingParams& params);
  // A text input's ids, tokenized as a text prompt is (BOS when the model's
  // tokenizer adds one). FieldError naming "input" for an empty text.
  std::vector<int32_t> embedding_ids(const std::string& text) const;

  const EngineConfig& config() const;
  const ModelConfig& model_config() const;
  const Tokenizer& tokenizer() const;
  // The model's chat template (config model.chat_template, else the model's
  // tokenizer_config.json); null when it has none, and then chat requests
  // are refused with the reason.
  const ChatTemplate* chat_template() const;

  // For programs that embed the pipeline in a larger CAF system: spawn your
  // actors here and send them the messages of actors/messages.hpp (events go
  // to the caf::actor named as sink). Actors you spawn must have exited
  // before the Engine is destroyed: its destructor joins the actor system.
  caf::actor_system& system();
  const caf::actor& tokenizer_actor() const;  // accepts messages of actors/messages.hpp
  const caf::actor& scheduler_actor() const;
  const caf::actor& executor_actor() const;
  const caf::actor& sampler_actor() const;
  const caf::actor& detokenizer_actor() const;

  // Writes the spans recorded so far as Chrome trace JSON (needs
  // record_trace or trace_file). Throws Error naming the file.
  void write_trace(const std::string& path) const;
  // The spans recorded so far, in the order they ended (needs record_trace
  // or trace_file; throws Error otherwise).
  std::vector<TraceSpan> trace_spans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmk
