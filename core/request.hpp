// What clients ask for and what they get back: the types every front end
// (Engine API, ZeroMQ, HTTP, the CLI, benchmarks) shares.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace llmk {

struct ChatInput;  // core/chat_template.hpp: a chat's messages and render options
struct StructuredOutput;  // core/grammar.hpp: a grammar the generated text must follow

// When a beam search stops (Hugging Face's early_stopping; docs/beam_search.md):
//  heuristic (false): once width hypotheses have finished and the best running
//    beam, scored at its current length, cannot beat the worst of them;
//  immediate (true): as soon as width hypotheses have finished;
//  never ("never"): only when no running beam can beat the worst finished one
//    at any length up to max_tokens (the exact bound), or at max_tokens.
enum class EarlyStopping { heuristic, immediate, never };
const char* to_string(EarlyStopping e) noexcept;

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off (divides positive logits of seen tokens, multiplies negative)
  float presence_penalty = 0.0f;    // subtracted once per distinct generated token
  float frequency_penalty = 0.0f;   // subtracted per occurrence in generated tokens
  std::optional<uint64_t> seed;     // same seed, same output, whatever else is in the batch
  int32_t logprobs = -1;            // -1: none; k >= 0: the chosen token's logprob plus the top k
  int32_t n = 1;                    // samples per prompt, sharing one prefill
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  std::vector<std::string> stop;        // stop strings; the match is not part of the text
  bool ignore_eos = false;
  // Speculative decoding (speculative.*): at most this many drafted tokens a
  // step for this request; 0 turns it off, -1 takes speculative.num_tokens.
  int32_t num_speculative_tokens = -1;
  // Beam search (core/scheduler_beam.cpp, docs/beam_search.md): 0 = off; W >=
  // 1 keeps W hypotheses on the model's raw log-probabilities and returns the
  // best n (n <= W) as samples 0..n-1, best first, once the search ends. A
  // hypothesis scores cumulative_logprob / generated_tokens^length_penalty.
  // Needs temperature 0 (or 1), no truncation, no penalties, no logprobs, no
  // stop strings and no speculative drafts (validate_sampling_params).
  int32_t beam_width = 0;
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::heuristic;
  // Structured outputs (core/grammar.hpp, docs/structured_outputs.md): every
  // sampled token keeps the text inside this grammar. Null: free text.
  std::shared_ptr<const StructuredOutput> structured;
};

// The one set of bounds on sampling parameters, for every front end (the
// Engine API, ZeroMQ, HTTP, batch files): validate_sampling_params applies
// them; the JSON readers only check types.
namespace sampling_limits {
inline constexpr float max_temperature = 100.0f;
inline constexpr float min_repetition_penalty = 0.01f;
inline constexpr float max_repetition_penalty = 100.0f;
inline constexpr float max_abs_penalty = 2.0f;  // presence_penalty and frequency_penalty in [-2, 2]
inline constexpr int32_t max_logprobs = 20;     // top alternatives a request may ask for
inline constexpr int32_t max_samples = 16;      // n
inline constexpr size_t max_stop_strings = 16;
inline constexpr int32_t max_speculative_tokens = 64;  // drafts a step (speculative.num_tokens too)
inline constexpr int32_t max_beam_width = max_logprobs / 2;  // each beam's row lists its best 2 * width tokens
inline constexpr float max_abs_length_penalty = 10.0f;
}  // namespace sampling_limits

// Throws FieldError(invalid_argument) naming the first field out of its
// bounds (sampling_limits; top_p in (0, 1], min_p in [0, 1], top_k >= -1,
// max_tokens >= 1, stop strings non-empty). Called where a request enters
// the engine (the scheduler's admission) and by the front ends as they parse.
void validate_sampling_params(const SamplingParams& params);
// The beam search part of it (beam_width > 0): n within the width, and no
// parameter that changes the rows' distributions (temperature 0 or 1).
void validate_beam_search(const SamplingParams& params);

struct KvHandoff;  // core/kv_handoff.hpp

// Where a router doing prefill/decode disaggregation pairs a request with
// its twin on the other replica (SGLang's bootstrap fields): the prefill
// replica's transfer endpoint and the pair's room.
struct BootstrapTicket {
  std::string host;
  int32_t port = 0;
  std::string room;
};

struct Request {
  std::string id;                   // chosen by the client, unique among its live requests
  std::string prompt;               // text, tokenized by the engine ...
  std::vector<int32_t> prompt_token_ids;  // ... unless token ids are given (then prompt is ignored)
  bool add_bos = true;              // for text prompts, when the model's tokenizer_config asks for it
  // A chat, rendered with the model's chat template and tokenized by the
  // engine's tokenizer actor; when set, prompt and prompt_token_ids are ignored.
  std::shared_ptr<const ChatInput> chat;
  SamplingParams sampling;
  // Refuse (invalid_argument) when the prompt plus max_tokens exceeds the
  // context, as the OpenAI API does; otherwise the completion stops there
  // (finish_reason length).
  bool strict_context = false;
  // Prefill/decode disaggregation (docs/replicas.md). A front end fills
  // bootstrap from the request; a replica in disaggregation mode turns it
  // into one of the two below.
  std::optional<BootstrapTicket> bootstrap;
  // Prefill: the engine stops at the first token and leaves the prompt's
  // K/V and that token under this key (EngineOptions::kv_handoffs).
  std::string kv_export_key;
  // Decode: starts from this handoff (its prompt tokens are the prompt, its
  // first token the first generated one) instead of computing the prompt.
  std::shared_ptr<KvHandoff> kv_import;
};

enum class FinishReason { none, stop, length, cancelled, error };
const char* to_string(FinishReason r) noexcept;

// A beam search hypothesis' scores (SamplingParams::beam_width), on its
// sample's final event: the sum of its tokens' log-probabilities (the final
// EOS or stop token included) and that sum over generated_tokens^length_penalty.
struct BeamScore {
  double cumulative_logprob = 0;
  double score = 0;
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token id, logprob), best first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // served from the prefix cache
};

// Seconds, measured on the engine's steady clock.
struct Timings {
  double queue_s = 0;                // arrival to first scheduled
  double time_to_first_token_s = 0;  // arrival to first token
  double e2e_s = 0;                  // arrival to finish
  std::vector<double> token_times_s; // arrival to each token
};

// One per produced token and sample index; the last event of a sample has
// finished = true, and the request is complete when every sample is.
struct RequestEvent {
  std::string request_id;
  int32_t index = 0;                 // sample index, 0..n-1
  std::vector<int32_t> token_ids;    // new tokens (usually one)
  std::string text_delta;            // new text (never a broken UTF-8 sequence)
  std::vector<TokenLogprob> logprobs;  // when requested, one per new token
  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  std::string error;                 // finish_reason == error: what went wrong
  ErrorCode error_code = ErrorCode::internal;  // finish_reason == error: its category (invalid_argument, overloaded...)
  std::string error_field;           // finish_reason == error: the request field at fault (FieldError), "" if none
  Usage usage;                       // on the finished event
  Timings timings;                   // on the finished event
  std::optional<BeamScore> beam;     // on the finished event of a beam search's hypothesis
  bool request_done = false;         // the last event of the whole request
};

// A pull-style stream of one request's events.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // Blocks up to timeout; nullopt on timeout. After the event with
  // request_done, returns nullopt at once.
  virtual std::optional<RequestEvent> next(std::chrono::milliseconds timeout) = 0;
};

}  // namespace llmk
