// Engine: opens the model and its tokenizer, builds the engine's parts
// (core/engine_parts.hpp: executor, KV allocator, scheduler), and starts the
// five actors over them and a sink actor that hands events to the
// submitters' callbacks.
//
// CAF scheduler settings (see docs/actors.md for the reasoning):
//  - policy "sharing": one queue, idle workers block on a condition variable.
//    Work stealing polls (aggressively, then every 50 us for ~25 ms) which
//    steals cycles from the forward's OpenMP threads on a small machine;
//    sharing wakes a worker in ~15 us and costs nothing while idle.
//  - scheduler.max-threads = EngineOptions::num_actor_threads (default 2) for
//    the tokenizer, scheduler, detokenizer, the sink and user actors;
//    the executor and the sampler are detached (a thread each).
#include "actors/engine.hpp"

#include "actors/built_executors.hpp"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "actors/trace.hpp"
#include "core/chat_template.hpp"
#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/grammar.hpp"
#include "core/engine_parts.hpp"
#include "core/plugin_loader.hpp"
#include "core/tokenizer.hpp"

namespace llmk {
namespace {

class QueueStream final : public EventStream {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<RequestEvent> events;
    bool done = false;  // the request_done event has been queued
  };

  explicit QueueStream(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    if (!shared_->ready.wait_for(lock, timeout, [&] { return !shared_->events.empty() || taken_last_; }))
      return std::nullopt;
    if (shared_->events.empty()) return std::nullopt;
    RequestEvent ev = std::move(shared_->events.front());
    shared_->events.pop_front();
    if (ev.request_done) taken_last_ = true;
    return ev;
  }

 private:
  std::shared_ptr<Shared> shared_;
  bool taken_last_ = false;
};

}  // namespace

struct Engine::Impl {
  EngineConfig config;
  EngineOptions options;
  std::shared_ptr<const Checkpoint> checkpoint;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat_template;  // null when the model has none
  std::shared_ptr<KvHandoffBox> kv_handoffs;         // disaggregation.mode prefill
  std::string chat_template_error;                    // then: why
  std::shared_ptr<Tracer> tracer;
  ModelRuntime runtime;  // the executor's: context limit and step size (embeddings' chunks)
  std::unique_ptr<caf::actor_system_config> caf_config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor tokenizer_handle, scheduler_handle, executor_handle, sampler_handle, detokenizer_handle, sink;
  ::llmk::tokenizer_actor tokenizer_typed;
  ::llmk::scheduler_actor scheduler_typed;

  std::mutex mutex;
  std::condition_variable drained;
  std::unordered_map<std::string, std::shared_ptr<EventCallback>> live;  // request id -> callback
  bool stopping = false;

  // On the sink actor: one event, in order per request.
  void dispatch(const RequestEvent& ev) {
    std::shared_ptr<EventCallback> callback;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = live.find(ev.request_id);
      if (it == live.end()) {
        spdlog::warn("engine: event for unknown request '{}' dropped", ev.request_id);
        return;
      }
      callback = it->second;
      if (ev.request_done) live.erase(it);
    }
    if (tracer) tracer->observe("client", "event", ev.request_id);
    try {
      (*callback)(ev);
    } catch (const std::exception& e) {
      spdlog::error("engine: event callback of '{}' threw: {}", ev.request_id, e.what());
    }
    if (ev.request_done) drained.notify_all();
  }

  std::shared_ptr<StepFeedback> feedback;  // the pipeline's, closed at stop
  void start_actors(std::shared_ptr<Executor> executor, std::shared_ptr<SchedulerParts> parts);
  void stop();
};

void Engine::Impl::start_actors(std::shared_ptr<Executor> executor_object, std::shared_ptr<SchedulerParts> parts) {
  runtime = executor_object->runtime();
  caf_config = std::make_unique<caf::actor_system_config>();
  caf_config->set("scheduler.policy", caf::atom("sharing"));
  caf_config->set("scheduler.max-threads", static_cast<size_t>(std::max(options.num_actor_threads, 1)));
  caf_config->add_message_types<caf::id_block::llmk>();
  system = std::make_unique<caf::actor_system>(*caf_config);

  PipelineContext context{tracer, PipelineTimeouts{options.step_timeout, options.message_timeout}};
  feedback = context.feedback;
  auto sampler = spawn_sampler(*system, context);
  auto executor = spawn_executor(*system, std::move(executor_object), sampler, context, tokenizer->vocab_size());
  auto detokenizer = spawn_detokenizer(*system, tokenizer, context);
  scheduler_typed = spawn_scheduler(*system, std::move(parts), executor, detokenizer, context);
  PromptEncoding encoding{tokenizer, checkpoint->config().add_bos_token, chat_template, chat_template_error,
                          checkpoint->config().eos_token_ids, structured_outputs_refusal(config.executor.device)};
  tokenizer_typed = spawn_tokenizer(*system, std::move(encoding), scheduler_typed, context);
  sampler_handle = caf::actor_cast<caf::actor>(sampler);
  executor_handle = caf::actor_cast<caf::actor>(executor);
  detokenizer_handle = caf::actor_cast<caf::actor>(detokenizer);
  scheduler_handle = caf::actor_cast<caf::actor>(scheduler_typed);
  tokenizer_handle = caf::actor_cast<caf::actor>(tokenizer_typed);
  Impl* impl = this;  // outlives the actor system (stop() joins it)
  sink = system->spawn(
      [](caf::event_based_actor*, Impl* owner) -> caf::behavior {
        return {[owner](RequestEvent& ev) { owner->dispatch(ev); }};
      },
      impl);
}

// Cancels what is in flight, waits (bounded) for the cancelled events, then
// sends every actor an exit message and joins the actor system.
void Engine::Impl::stop() {
  if (!system) return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  if (tokenizer_typed) {
    caf::scoped_actor self{*system};
    self->request(tokenizer_typed, options.message_timeout, shutdown_atom::value)
        .receive([](bool) {},
                 [](caf::error& err) { spdlog::warn("engine: shutdown was not acknowledged: {}", describe(err)); });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!drained.wait_for(lock, options.message_timeout, [&] { return live.empty(); }))
      spdlog::warn("engine: {} requests had no final event at shutdown", live.size());
    live.clear();
  }
  for (const caf::actor* h : {&tokenizer_handle, &scheduler_handle, &executor_handle, &sampler_handle,
                              &detokenizer_handle, &sink}) {
    if (*h) caf::anon_send_exit(*h, caf::exit_reason::user_shutdown);
  }
  if (feedback) feedback->close();  // an executor waiting for the sampler's ids stops waiting
  tokenizer_typed = nullptr;
  scheduler_typed = nullptr;
  tokenizer_handle = scheduler_handle = executor_handle = sampler_handle = detokenizer_handle = sink = nullptr;
  system.reset();  // joins the actors (the executor finishes a running forward first)
  caf_config.reset();
  if (tracer && !options.trace_file.empty()) {
    try {
      tracer->write_chrome_trace(options.trace_file);
    } catch (const std::exception& e) {
      spdlog::error("engine: {}", e.what());
    }
  }
}

Engine::Engine(const EngineConfig& config, EngineOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& im = *impl_;
  im.config = config;
  im.options = std::move(options);
  validate(im.config);
  if (!im.options.trace_file.empty()) im.options.record_trace = true;
  if (im.options.record_trace || im.options.observer)
    im.tracer = std::make_shared<Tracer>(im.options.record_trace, im.options.observer);

  im.checkpoint = open_model(im.config.model);
  if (im.checkpoint->tokenizer_path().empty())
    throw Error(ErrorCode::not_found, "no tokenizer.model or tokenizer.json for model '" + im.config.model.path +
                                          "' (set model.tokenizer)");
  im.tokenizer = std::make_shared<const Tokenizer>(im.checkpoint->tokenizer_path());
  try {
    im.chat_template = std::make_shared<const ChatTemplate>(
        resolve_chat_template(im.config.model.chat_template, im.config.model.path));
  } catch (const Error& e) {
    // A template the configuration names must work; a model without one
    // still serves completions, and its chat requests get this reason.
    if (!im.config.model.chat_template.empty()) throw;
    im.chat_template_error = e.what();
  }

  std::vector<std::filesystem::path> search_path(im.config.plugins.search_path.begin(),
                                                 im.config.plugins.search_path.end());
  PluginRegistry registry(search_path);
  register_built_executors();
  EngineParts parts = build_engine_parts(im.config, im.checkpoint, registry, im.options.kv_events);
  im.kv_handoffs = parts.scheduling->handoffs;
  spdlog::info("engine: {} actor threads (CAF sharing policy)", im.options.num_actor_threads);
  try {
    im.start_actors(std::move(parts.executor), std::move(parts.scheduling));
  } catch (...) {
    im.stop();  // whatever was spawned must exit before the actor system goes
    throw;
  }
}

Engine::~Engine() {
  try {
    impl_->stop();
  } catch (const std::exception& e) {
    spdlog::error("engine: shutdown: {}", e.what());
  }
}

void Engine::submit(Request request, EventCallback on_event) {
  auto callback = std::make_shared<EventCallback>(std::move(on_event));
  std::string refusal;
  ErrorCode refusal_code = ErrorCode::invalid_argument;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) {
      refusal = "the engine is shutting down";
      refusal_code = ErrorCode::overloaded;
    } else if (impl_->live.count(request.id))
      refusal = "a live request already has the id '" + request.id + "'";
    else
      impl_->live.emplace(request.id, callback);
  }
  if (!refusal.empty()) {
    // Refused before entering the pipeline: answered on the caller's thread.
    (*callback)(make_error_event(request.id, refusal, refusal_code));
    return;
  }
  caf::anon_send(impl_->tokenizer_typed, submit_atom::value, std::move(request), impl_->sink);
}

std::unique_ptr<EventStream> Engine::submit(Request request) {
  auto shared = std::make_shared<QueueStream::Shared>();
  submit(std::move(request), [shared](const RequestEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->events.push_back(ev);
      if (ev.request_done) shared->done = true;
    }
    shared->ready.notify_all();
  });
  return std::make_unique<QueueStream>(shared);
}

bool Engine::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping || !impl_->live.count(request_id)) return false;
  }
  caf::anon_send(impl_->tokenizer_typed, cancel_atom::value, request_id);
  return true;
}

EngineStats Engine::stats() const {
  EngineStats stats;
  caf::scoped_actor self{*impl_->system};
  self->request(impl_->scheduler_typed, impl_->options.message_timeout, stats_atom::value)
      .receive([&](EngineStats& s) { stats = std::move(s); },
               [](caf::error& err) { spdlog::warn("engine: stats: {}", describe(err)); });
  return stats;
}

std::shared_ptr<KvHandoffBox> Engine::kv_handoffs() const { return impl_->kv_handoffs; }

uint32_t Engine::flush_cache() {
  uint32_t num_dropped = 0;
  std::optional<caf::error> failure;
  caf::scoped_actor self{*impl_->system};
  self->request(impl_->scheduler_typed, impl_->options.message_timeout, flush_cache_atom::value)
      .receive([&](uint32_t n) { num_dropped = n; }, [&](caf::error& err) { failure = std::move(err); });
  if (failure) throw Error(error_code_of(*failure), "flush_cache: " + describe(*failure));
  return num_dropped;
}

std::vector<int32_t> Engine::embedding_ids(const std::string& text) const {
  if (text.empty()) throw FieldError("input", "an embedding input is an empty string");
  return impl_->tokenizer->encode(text, impl_->checkpoint->config().add_bos_token);
}

std::vector<float> Engine::embed(const std::vector<int32_t>& token_ids, const EmbeddingParams& params) {
  const ModelConfig& model = impl_->checkpoint->config();
  validate_embedding_params(params, model.hidden_size);
  const auto n = static_cast<int64_t>(token_ids.size());
  if (n == 0) throw FieldError("input", "an embedding input has no tokens");
  if (n > static_cast<int64_t>(impl_->runtime.max_seq_len))
    throw FieldError("input", "an embedding input has " + std::to_string(n) + " tokens, more than the context of " +
                                  std::to_string(impl_->runtime.max_seq_len));
  for (int32_t id : token_ids) {
    if (id < 0 || id >= model.vocab_size)
      throw FieldError("input", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                    std::to_string(model.vocab_size) + ")");
  }
  EmbedJob job{token_ids, params, static_cast<int32_t>(impl_->runtime.max_step_tokens)};
  const int64_t chunks = (n + job.chunk_tokens - 1) / job.chunk_tokens;
  // The steps already queued at the executor run first (two at most), then the chunks.
  const auto timeout = impl_->options.message_timeout + impl_->options.step_timeout * (chunks + 2);
  std::vector<float> vector;
  std::optional<caf::error> failure;
  caf::scoped_actor self{*impl_->system};
  self->request(impl_->scheduler_typed, timeout, embed_atom::value, std::move(job))
      .receive([&](EmbedResult& r) { vector = std::move(r.vector); }, [&](caf::error& err) { failure = std::move(err); });
  if (failure) throw Error(error_code_of(*failure), describe(*failure));
  return vector;
}

const EngineConfig& Engine::config() const { return impl_->config; }
const ModelConfig& Engine::model_config() const { return impl_->checkpoint->config(); }
const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
const ChatTemplate* Engine::chat_template() const { return impl_->chat_template.get(); }
caf::actor_system& Engine::system() { return *impl_->system; }
const caf::actor& Engine::tokenizer_actor() const { return impl_->tokenizer_handle; }
const caf::actor& Engine::scheduler_actor() const { return impl_->scheduler_handle; }
const caf::actor& Engine::executor_actor() const { return impl_->executor_handle; }
const caf::actor& Engine::sampler_actor() const { return impl_->sampler_handle; }
const caf::actor& Engine::detokenizer_actor() const { return impl_->detokenizer_handle; }

void Engine::write_trace(const std::string& path) const {
  if (!impl_->tracer || !impl_->tracer->recording())
    throw Error(ErrorCode::invalid_argument, "no trace recorded: start the engine with record_trace or trace_file");
  impl_->tracer->write_chrome_trace(path);
}

std::vector<TraceSpan> Engine::trace_spans() const {
  if (!impl_->tracer || !impl_->tracer->recording())
    throw Error(ErrorCode::invalid_argument, "no trace recorded: start the engine with record_trace or trace_file");
  return impl_->tracer->spans();
}

}  // namespace llmk
