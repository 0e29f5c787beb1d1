// Every message of the serving pipeline, in the order of a request's life:
//
//   client ─submit─▶ tokenizer ─enqueue─▶ scheduler ─open─▶ detokenizer
//                                          │  ▲
//                                  execute │  │ StepResult: token ids and logprobs
//                                          ▼  │ (the sampler answers the scheduler)
//                                      executor ─sample: LogitsView─▶ sampler
//   scheduler ─tokens─▶ detokenizer ─RequestEvent─▶ client
//             ◀─StopHits─  (samples whose text hit a stop string)
//
// plus the side channels: embed (client → scheduler → executor: a prefill
// that returns one pooled vector, run between steps), cancel (client → tokenizer → scheduler), stats
// and flush_cache (client → scheduler: drops the prefix-cache blocks no live
// sequence holds, answers how many) and shutdown (client → tokenizer → scheduler →
// detokenizer). The actors' typed interfaces are at the end of this file.
//
// All of these travel inside one process; inspect() exists so that CAF can
// print them (logs, unexpected-message errors) and so that they could be
// serialized if the pipeline were ever split across nodes.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/engine.hpp"
#include "core/embedding.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/request.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"
#include "core/step.hpp"

// The plugin API's C structs live in the global namespace: their inspect()
// must too, for argument-dependent lookup.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, llmk_kv_copy& x) {
  return f(caf::meta::type_name("llmk_kv_copy"), x.src_slot, x.dst_slot, x.num_slots);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, llmk_kv_usage& x) {
  return f(caf::meta::type_name("llmk_kv_usage"), x.total_slots, x.reserved_slots, x.used_slots,
           x.cached_free_slots, x.num_seqs, x.prefix_query_tokens, x.prefix_hit_tokens, x.num_relocations,
           x.num_extend_in_place, x.num_cow_copies, x.largest_free_run);
}

namespace llmk {

// ---------------------------------------------------------------------------
// Tags. CAF atoms hold at most 10 characters.

using submit_atom = caf::atom_constant<caf::atom("submit")>;      // client → tokenizer
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;      // client → tokenizer → scheduler
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;    // tokenizer → scheduler
using open_atom = caf::atom_constant<caf::atom("open")>;          // scheduler → detokenizer
using execute_atom = caf::atom_constant<caf::atom("execute")>;    // scheduler → executor
using flush_atom = caf::atom_constant<caf::atom("flush")>;        // scheduler → executor (pipelined)
using sample_atom = caf::atom_constant<caf::atom("sample")>;      // executor → sampler
using tokens_atom = caf::atom_constant<caf::atom("tokens")>;      // scheduler → detokenizer
using stats_atom = caf::atom_constant<caf::atom("stats")>;        // client → scheduler
using flush_cache_atom = caf::atom_constant<caf::atom("flushcache")>;  // client → scheduler
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;  // client → tokenizer → scheduler → detokenizer
using embed_atom = caf::atom_constant<caf::atom("embed")>;        // client → scheduler → executor

// ---------------------------------------------------------------------------
// 1. client → tokenizer: (submit_atom, Request, caf::actor sink)
//    The sink receives every RequestEvent of the request (core/request.hpp).
//    An invalid request is answered by the tokenizer with one finished error
//    event; nothing else happens to it.
//
// 2. tokenizer → scheduler: (enqueue_atom, TokenizedRequest) → bool
//    Refusals (queue full, duplicate live id, shutting down) come back as a
//    caf::error that the tokenizer turns into an error event.
struct TokenizedRequest {
  Request request;                  // as submitted (validated)
  std::vector<int32_t> prompt_ids;  // what the model sees, BOS included
  caf::actor sink;
};

// 3. scheduler → detokenizer: (open_atom, DetokenizerOpen)
//    Sent once a request is accepted, before any of its tokens.
struct DetokenizerOpen {
  std::string request_id;
  caf::actor sink;
  int32_t n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> prompt_ids;  // decides whether the text continues the prompt
};

// 4. scheduler → executor: (execute_atom, StepWork) → StepResult
//    The executor runs the forward on its Executor (core/executor.hpp) and
//    delegates (sample_atom, SampleWork, LogitsView) to the sampler, whose
//    StepResult answers the scheduler.
//
//    The sampler keeps each request's sampling state (parameters, seed, the
//    prompt ids the repetition penalty needs, every sample's generated ids)
//    and is told only what changed: a request once, before its first logits
//    row (SamplerOpen); per row, which sample it is for; the requests that
//    ended (released). Generated ids never travel: the sampler appends the
//    ids it samples itself, which are exactly the tokens the scheduler
//    appends (a token it drops belongs to a sample that has ended).
struct SamplerOpen {
  uint64_t request_key = 0;  // Sequence::request_key: names the request in rows and releases
  std::shared_ptr<const SamplingParams> sampling;  // shared with the request; seed resolved
  int32_t num_samples = 1;   // n
  std::vector<int32_t> prompt_ids;  // only when the repetition penalty is on
  // Tokens sample 0 generated before its first row here (a request handed
  // off by a prefill replica, with its first token).
  std::vector<int32_t> generated_ids{};
};

struct SampleRow {  // one logits row of the step
  uint64_t request_key = 0;
  int32_t sample_index = 0;
  int32_t num_generated = 0;  // the sample's tokens so far (the scheduler's count; the sampler checks its own)
  // Speculative: the draft fed on the next row; that row and the sample's
  // later rows of the step count only if this row's id equals it. -1: none.
  int32_t draft_token = -1;
  // Speculative token trees (LogitsTarget::tree_parent): the row of this
  // node's parent, whose id must equal tree_token for this row's id to
  // count; -1 outside trees.
  int32_t tree_parent = -1;
  int32_t tree_token = -1;
  // The distribution the draft was drawn from (SamplerRow::draft_probs),
  // null when proposed with certainty. Host memory shared with the plan,
  // so the row goes only to an actor of this process (not serialised).
  DraftProbs draft_probs = nullptr;
};

struct SampleWork {
  uint64_t step = 0;
  std::vector<SamplerOpen> opened;  // requests whose first logits row is in this step
  std::vector<uint64_t> released;   // request keys done since the previous step (applied first)
  std::vector<SampleRow> rows;      // [batch.num_logits()]
  double forward_s = 0;             // set by the executor
  // A step planned ahead: the step whose ids its fed-back rows take (0:
  // none). If the sampler has not sampled that step (its forward or its
  // sampling failed), a row one id ahead of its sample's history belongs to
  // a sequence that failure ended: it is sampled into a scratch history and
  // its token is discarded by the scheduler.
  uint64_t fed_from = 0;
  // Set by the scheduler: every row's params choose the raw logits' argmax
  // (chooses_raw_argmax, core/sampler.hpp), so the executor may pick and
  // publish the step's ids itself (actors/step_feedback.hpp).
  bool raw_argmax = false;
  // Set by the executor when it did: the ids it published, [rows]. The
  // sampler publishes nothing for the step then, and fails it if its own
  // ids differ.
  std::vector<int32_t> published_ids = {};
  // Set by the scheduler where its proposer reads the target's hidden
  // states (Medusa heads): the executor copies the final-RMSNorm row of
  // every logits row into `hidden` ([rows, hidden_size]; empty where it
  // keeps none), which the sampler passes on in its StepResult.
  bool keep_hidden = false;
  std::vector<float> hidden = {};
};

struct StepWork {
  StepBatch batch;
  SampleWork sample;
};

//    A pipelined executor answers later, in step order; the scheduler sends
//    (flush_atom, last step sent, last result received) when it has nothing
//    more to start, so the executor takes the oldest step's logits then.
//
// 5. executor → sampler: (sample_atom, SampleWork, LogitsView)
//    The view's rows are work.rows in order, on the executor's device; valid
//    until the sampler marks the step sampled (actors/step_feedback.hpp).
struct StepResult {
  uint64_t step = 0;
  std::vector<SampledToken> tokens;  // [num_logits], row order (core/sampler.hpp)
  double forward_s = 0;              // executor time
  double sample_s = 0;               // sampler time
  std::vector<float> hidden;         // SampleWork::hidden, passed on
};

// 6. scheduler → detokenizer: (tokens_atom, StepTokens) → StopHits
//    The scheduler's TokenEvents (core/scheduler.hpp) of one step, or of a
//    cancel / stop, each with its logprobs when the request asked for them.
struct SampleOutput {
  TokenEvent event;
  bool has_logprob = false;
  TokenLogprob logprob;
};

struct StepTokens {
  uint64_t step = 0;  // 0 for events outside a step (cancel, stop, refusal)
  std::vector<SampleOutput> outputs;
};

// The samples whose text hit a stop string: the scheduler finishes them
// (their KV is freed). The detokenizer has already sent their final event.
struct SampleRef {
  std::string request_id;
  int32_t index = 0;
};

struct StopHits {
  std::vector<SampleRef> samples;
};

// 7. detokenizer → client: RequestEvent (core/request.hpp), in order per
//    request; the finished event of each sample carries usage and timings.

// Embeddings, a side channel:
//    client → scheduler: (embed_atom, EmbedJob) → EmbedResult
//    The scheduler reserves KV for the input as a sequence of its own (no
//    prefix-cache lookup, never committed), answers Error(overloaded) when
//    there is no room, and sends the whole input's prefill chunks at once:
//    scheduler → executor: (embed_atom, EmbedWork) → EmbedResult
//    The executor actor runs the chunks back to back inside that one
//    message, so they never run beside a step; the scheduler frees the KV
//    when the answer (or the failure) comes back.
struct EmbedJob {
  std::vector<int32_t> token_ids;
  EmbeddingParams params;
  int32_t chunk_tokens = 0;  // the most tokens one prefill chunk holds (the runtime's max_step_tokens)
};

struct EmbedWork {
  std::vector<StepBatch> chunks;  // in position order; the rows to pool are each chunk's logits_rows
  EmbeddingParams params;
};

struct EmbedResult {
  std::vector<float> vector;  // pooled, truncated and normalised as the params ask
};

// ---------------------------------------------------------------------------
// Errors that cross actors: a caf::error in category "llmk" whose code is an
// llmk::ErrorCode and whose context is the message text and the request
// field at fault ("" when none: a FieldError's field, OpenAI's "param").

caf::error make_actor_error(int code, std::string message, std::string field = {});
// "what went wrong" from any caf::error (ours carry the text).
std::string describe(const caf::error& err);
// The ErrorCode an actor error carries (internal when it is not one of ours).
ErrorCode error_code_of(const caf::error& err);
// The request field an actor error names ("" when none or not one of ours).
std::string field_of(const caf::error& err);

// ---------------------------------------------------------------------------
// inspect(): field lists for CAF (enums such as FinishReason travel as
// their underlying integer).

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingParams& x) {
  bool has_seed = x.seed.has_value();
  uint64_t seed = x.seed.value_or(0);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.seed = has_seed ? std::optional<uint64_t>(seed) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("SamplingParams"), x.temperature, x.top_k, x.top_p, x.min_p,
           x.repetition_penalty, x.presence_penalty, x.frequency_penalty, has_seed, seed, load, x.logprobs,
           x.n, x.max_tokens, x.stop_token_ids, x.stop, x.ignore_eos, x.num_speculative_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Request& x) {
  return f(caf::meta::type_name("Request"), x.id, x.prompt, x.prompt_token_ids, x.add_bos, x.sampling);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenLogprob& x) {
  return f(caf::meta::type_name("TokenLogprob"), x.token_id, x.logprob, x.top);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Usage& x) {
  return f(caf::meta::type_name("Usage"), x.prompt_tokens, x.completion_tokens, x.cached_prompt_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Timings& x) {
  return f(caf::meta::type_name("Timings"), x.queue_s, x.time_to_first_token_s, x.e2e_s, x.token_times_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RequestEvent& x) {
  return f(caf::meta::type_name("RequestEvent"), x.request_id, x.index, x.token_ids, x.text_delta, x.logprobs,
           x.finished, x.finish_reason, x.error, x.error_field, x.usage, x.timings, x.request_done);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenizedRequest& x) {
  return f(caf::meta::type_name("TokenizedRequest"), x.request, x.prompt_ids, x.sink);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DetokenizerOpen& x) {
  return f(caf::meta::type_name("DetokenizerOpen"), x.request_id, x.sink, x.n, x.stop, x.prompt_ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FedBackToken& x) {
  return f(caf::meta::type_name("FedBackToken"), x.row, x.previous_row);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepBatch& x) {
  return f(caf::meta::type_name("StepBatch"), x.token_ids, x.positions, x.query_start, x.context_lens,
           x.slot_mapping, x.block_tables, x.max_blocks_per_seq, x.block_size, x.logits_rows, x.kv_copies,
           x.fed_back);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplerOpen& x) {
  // The sampling parameters are shared, not copied; they print through the
  // pointer and load into a fresh object.
  SamplingParams params = x.sampling ? *x.sampling : SamplingParams{};
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.sampling = std::make_shared<const SamplingParams>(params);
    return caf::none;
  });
  return f(caf::meta::type_name("SamplerOpen"), x.request_key, params, load, x.num_samples, x.prompt_ids,
           x.generated_ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SampleRow& x) {
  return f(caf::meta::type_name("SampleRow"), x.request_key, x.sample_index, x.num_generated, x.draft_token,
           x.tree_parent, x.tree_token);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SampleWork& x) {
  return f(caf::meta::type_name("SampleWork"), x.step, x.opened, x.released, x.rows, x.forward_s, x.fed_from,
           x.raw_argmax, x.published_ids, x.keep_hidden, x.hidden);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepWork& x) {
  return f(caf::meta::type_name("StepWork"), x.batch, x.sample);
}

// A view is an address in this process: it prints, and loads back, as numbers.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LogitsView& x) {
  auto device = static_cast<uint8_t>(x.device);
  auto data = reinterpret_cast<uintptr_t>(x.data);
  auto event = reinterpret_cast<uintptr_t>(x.ready.event);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.device = static_cast<Device>(device);
    x.data = reinterpret_cast<const float*>(data);
    x.ready.event = reinterpret_cast<void*>(event);
    return caf::none;
  });
  return f(caf::meta::type_name("LogitsView"), device, data, x.num_rows, x.vocab_size, x.row_stride, event, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SampledToken& x) {
  return f(caf::meta::type_name("SampledToken"), x.token_id, x.has_logprobs, x.logprobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepResult& x) {
  return f(caf::meta::type_name("StepResult"), x.step, x.tokens, x.forward_s, x.sample_s, x.hidden);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenEvent& x) {
  bool has_token = x.token_id.has_value();
  int32_t token = x.token_id.value_or(-1);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.token_id = has_token ? std::optional<int32_t>(token) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("TokenEvent"), x.request_id, x.index, has_token, token, load, x.logits_row, x.finished,
           x.finish_reason, x.is_stop_token, x.error, x.usage, x.timings, x.request_done);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SampleOutput& x) {
  return f(caf::meta::type_name("SampleOutput"), x.event, x.has_logprob, x.logprob);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepTokens& x) {
  return f(caf::meta::type_name("StepTokens"), x.step, x.outputs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SampleRef& x) {
  return f(caf::meta::type_name("SampleRef"), x.request_id, x.index);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EmbeddingParams& x) {
  return f(caf::meta::type_name("EmbeddingParams"), x.pooling, x.normalize, x.dimensions);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EmbedJob& x) {
  return f(caf::meta::type_name("EmbedJob"), x.token_ids, x.params, x.chunk_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EmbedWork& x) {
  return f(caf::meta::type_name("EmbedWork"), x.chunks, x.params);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EmbedResult& x) {
  return f(caf::meta::type_name("EmbedResult"), x.vector);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StopHits& x) {
  return f(caf::meta::type_name("StopHits"), x.samples);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EngineStats& x) {
  return f(caf::meta::type_name("EngineStats"), x.num_running, x.num_waiting, x.num_requests_total,
           x.num_requests_finished, x.num_prompt_tokens, x.num_prefill_tokens, x.num_generated_tokens,
           x.num_preemptions, x.num_steps, x.mean_batch_seqs, x.mean_batch_tokens, x.kv, x.peak_running,
           x.peak_steps_in_flight, x.num_spec_drafts, x.num_spec_draft_tokens, x.num_spec_accepted_tokens);
}

// ---------------------------------------------------------------------------
// The actors' typed interfaces, declared once.

using tokenizer_actor = caf::typed_actor<               //
    caf::reacts_to<submit_atom, Request, caf::actor>,   // sink
    caf::reacts_to<cancel_atom, std::string>,           // request id
    caf::replies_to<shutdown_atom>::with<bool>>;

using scheduler_actor = caf::typed_actor<               //
    caf::replies_to<enqueue_atom, TokenizedRequest>::with<bool>,
    caf::reacts_to<cancel_atom, std::string>,
    caf::replies_to<stats_atom>::with<EngineStats>,
    caf::replies_to<flush_cache_atom>::with<uint32_t>,  // blocks dropped
    caf::replies_to<embed_atom, EmbedJob>::with<EmbedResult>,
    caf::replies_to<shutdown_atom>::with<bool>>;

using sampler_actor = caf::typed_actor<  //
    caf::replies_to<sample_atom, SampleWork, LogitsView>::with<StepResult>>;

using executor_actor = caf::typed_actor<  //
    caf::replies_to<execute_atom, StepWork>::with<StepResult>,
    caf::replies_to<embed_atom, EmbedWork>::with<EmbedResult>,
    // pipelined executors: the last step sent, the last result seen
    caf::reacts_to<flush_atom, uint64_t, uint64_t>>;

using detokenizer_actor = caf::typed_actor<  //
    caf::reacts_to<open_atom, DetokenizerOpen>,
    caf::replies_to<tokens_atom, StepTokens>::with<StopHits>,
    caf::replies_to<shutdown_atom>::with<bool>>;

}  // namespace llmk

// CAF type ids for the custom message types (CAF 0.17 uses them to announce
// types; Engine registers the block with add_message_types).
CAF_BEGIN_TYPE_ID_BLOCK(llmk, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(llmk, (llmk::Request))
CAF_ADD_TYPE_ID(llmk, (llmk::RequestEvent))
CAF_ADD_TYPE_ID(llmk, (llmk::TokenizedRequest))
CAF_ADD_TYPE_ID(llmk, (llmk::DetokenizerOpen))
CAF_ADD_TYPE_ID(llmk, (llmk::StepWork))
CAF_ADD_TYPE_ID(llmk, (llmk::SampleWork))
CAF_ADD_TYPE_ID(llmk, (llmk::LogitsView))
CAF_ADD_TYPE_ID(llmk, (llmk::StepResult))
CAF_ADD_TYPE_ID(llmk, (llmk::StepTokens))
CAF_ADD_TYPE_ID(llmk, (llmk::StopHits))
CAF_ADD_TYPE_ID(llmk, (llmk::EngineStats))
CAF_ADD_TYPE_ID(llmk, (llmk::EmbedJob))
CAF_ADD_TYPE_ID(llmk, (llmk::EmbedWork))
CAF_ADD_TYPE_ID(llmk, (llmk::EmbedResult))
CAF_END_TYPE_ID_BLOCK(llmk)
