// Scheduler: requests in, tokens and endings out. The planning half (the
// three phases of schedule(), preemption, batch rows) is scheduler_plan.cpp.
#include "core/scheduler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/sampler.hpp"
#include "core/speculation.hpp"

namespace llmk {

Scheduler::Scheduler(const SchedulerSection& config, const SchedulerLimits& limits, KvAllocator& kv,
                     SchedulerOptions options)
    : config_(config), limits_(limits), kv_(kv), clock_(std::move(options.clock)), offloader_(options.offloader),
      kv_io_(options.kv_io != nullptr ? options.kv_io : options.offloader), handoffs_(options.handoffs),
      kv_layout_(std::move(options.kv_layout)) {
  if (!clock_) clock_ = [] { return SteadyClock::now(); };
  if (config_.policy != "continuous" && config_.policy != "static")
    throw Error(ErrorCode::invalid_config,
                "scheduler.policy: '" + config_.policy + "' is not one of continuous, static");
  if (config_.preemption != "recompute" && config_.preemption != "offload")
    throw Error(ErrorCode::invalid_config,
                "scheduler.preemption: '" + config_.preemption + "' is not one of recompute, offload");
  if (config_.preemption == "offload" && offloader_ == nullptr)
    throw Error(ErrorCode::invalid_config, "scheduler.preemption: offload needs a KvOffloader (none was given)");
  if (config_.max_num_seqs == 0 || config_.max_num_batched_tokens == 0)
    throw Error(ErrorCode::invalid_config,
                "scheduler.max_num_seqs and scheduler.max_num_batched_tokens must be at least 1");
  if (limits_.max_seq_len < 2)
    throw Error(ErrorCode::invalid_config, "scheduler: max_seq_len must be at least 2, got " +
                                               std::to_string(limits_.max_seq_len));
  if (kv_.block_size() == 0) throw Error(ErrorCode::plugin, "scheduler: the KV allocator reports block_size 0");
  is_static_ = config_.policy == "static";
  if (config_.preemption == "recompute") offloader_ = nullptr;
  max_num_batched_tokens_ = static_cast<int32_t>(config_.max_num_batched_tokens);
  max_num_seqs_ = static_cast<int32_t>(std::min(config_.max_num_seqs, config_.max_num_batched_tokens));
  if (options.max_steps_in_flight < 1)
    throw Error(ErrorCode::invalid_config, "scheduler: max_steps_in_flight must be at least 1, got " +
                                               std::to_string(options.max_steps_in_flight));
  max_steps_in_flight_ = is_static_ ? 1 : options.max_steps_in_flight;
  init_speculation(options.speculative, options.proposer, options.token_trees);
  init_stream(options.stream);
}

Scheduler::~Scheduler() = default;

void Scheduler::add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                            const SamplingParams& sampling, bool strict_context, SequenceHandoff handoff) {
  // `field`: the request field at fault (FieldError), "" when none is.
  auto refuse = [&request_id](const std::string& why, const std::string& field = {}) {
    if (!field.empty()) throw FieldError(field, "request '" + request_id + "': " + why);
    throw Error(ErrorCode::invalid_argument, "request '" + request_id + "': " + why);
  };
  const auto num_prompt = static_cast<int64_t>(prompt_token_ids.size());
  if (num_prompt == 0) refuse("the prompt is empty");
  // A streaming window keeps the cache within the context whatever the length.
  if (!streaming() && num_prompt + 1 > limits_.max_seq_len)
    refuse("the prompt has " + std::to_string(num_prompt) + " tokens; the context limit is " +
           std::to_string(limits_.max_seq_len) + " and at least one token must be generated");
  try {
    validate_sampling_params(sampling);
  } catch (const FieldError& e) {
    throw FieldError(e.field(), "request '" + request_id + "': " + e.what(), e.code());
  }
  if (std::max(sampling.n, sampling.beam_width) > max_num_seqs_)
    refuse((sampling.beam_width > sampling.n ? "beam_width = " + std::to_string(sampling.beam_width)
                                             : "n = " + std::to_string(sampling.n)) +
           " exceeds the batch limit of " + std::to_string(max_num_seqs_) + " sequences",
           sampling.beam_width > sampling.n ? "beam_width" : "n");
  if (strict_context && !streaming() && num_prompt + sampling.max_tokens > limits_.max_seq_len)
    refuse("this model's context holds " + std::to_string(limits_.max_seq_len) + " tokens, but " +
           std::to_string(num_prompt + sampling.max_tokens) + " were requested (" + std::to_string(num_prompt) +
           " in the prompt, " + std::to_string(sampling.max_tokens) + " for the completion)",
           "max_tokens");
  if (limits_.vocab_size > 0)
    for (int32_t t : prompt_token_ids)
      if (t < 0 || t >= limits_.vocab_size)
        refuse("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
               std::to_string(limits_.vocab_size) + ")");
  if (requests_.count(request_id)) refuse("a request with this id is still running");
  if (waiting_.size() >= config_.max_queue)
    throw Error(ErrorCode::overloaded, "request '" + request_id + "': the queue is full (" +
                                           std::to_string(config_.max_queue) + " requests wait)");

  auto seq = std::make_unique<Sequence>();
  seq->seq_id = next_seq_id_++;
  seq->request_key = seq->seq_id;
  seq->request_id = request_id;
  seq->arrival_order = next_arrival_order_++;
  seq->tokens = std::move(prompt_token_ids);
  seq->num_prompt_tokens = static_cast<int32_t>(num_prompt);
  seq->num_unforked_samples = sampling.n;
  // The seed is resolved once: every sample and every resume draws from it.
  auto resolved = std::make_shared<SamplingParams>(sampling);
  resolved->seed = resolve_seed(sampling.seed);
  seq->sampling = std::move(resolved);
  seq->stop = make_stop_conditions(sampling, limits_.eos_token_ids,
                                   streaming() ? std::numeric_limits<int32_t>::max() : limits_.max_seq_len);
  seq->arrival_time = now();
  if (sampling.beam_width > 0) add_beam_request(request_id, *seq, sampling, handoff);
  if (!handoff.export_key.empty() || handoff.import) {
    check_handoff(*seq, handoff);
    seq->kv_export_key = std::move(handoff.export_key);
    if (handoff.import) import_handoff(*seq, *handoff.import);
  }

  RequestState& state = requests_[request_id];
  state.num_samples = sampling.n;
  state.seq_ids.push_back(seq->seq_id);
  waiting_.push_back(seq.get());
  seqs_.emplace(seq->seq_id, std::move(seq));
  stats_.num_requests_total += 1;
  stats_.num_prompt_tokens += static_cast<uint64_t>(num_prompt);
}

std::vector<TokenEvent> Scheduler::abort_request(const std::string& request_id) {
  std::vector<TokenEvent> events;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return events;
  const std::vector<uint64_t> ids = it->second.seq_ids;  // finish() may erase the request
  for (uint64_t id : ids)
    if (Sequence* seq = find(id)) finish(*seq, FinishReason::cancelled, std::nullopt, "", events);
  return events;
}

std::vector<TokenEvent> Scheduler::finish_request(const std::string& request_id, int32_t index,
                                                  FinishReason reason) {
  std::vector<TokenEvent> events;
  if (const Sequence* seq = sample(request_id, index))
    finish(*find(seq->seq_id), reason, std::nullopt, "", events);
  return events;
}

std::vector<TokenEvent> Scheduler::update_from_output(const StepPlan& plan, const std::vector<int32_t>& sampled,
                                                      const std::vector<SampledToken>* details,
                                                      std::span<const float> hidden) {
  if (in_flight_.empty() || plan.step_id != in_flight_.front())
    throw Error(ErrorCode::internal, "Scheduler::update_from_output: step " + std::to_string(plan.step_id) +
                                         " is not the oldest plan in flight");
  if (sampled.size() != plan.logits.size())
    throw Error(ErrorCode::invalid_argument, "Scheduler::update_from_output: " + std::to_string(sampled.size()) +
                                                 " sampled tokens for " + std::to_string(plan.logits.size()) +
                                                 " logits rows");
  if (!hidden.empty() && (plan.logits.empty() || hidden.size() % plan.logits.size() != 0))
    throw Error(ErrorCode::invalid_argument, "Scheduler::update_from_output: " + std::to_string(hidden.size()) +
                                                 " hidden floats for " + std::to_string(plan.logits.size()) +
                                                 " logits rows");
  in_flight_.pop_front();
  step_hidden_ = hidden;
  step_hidden_size_ = hidden.empty() ? 0 : hidden.size() / plan.logits.size();
  std::vector<TokenEvent> events;
  const TimePoint t = now();
  size_t next_logit = 0;
  std::vector<BeamRow> beam_rows;  // updated together once every row is in
  for (const ScheduledSeq& s : plan.seqs) {
    const size_t first_row = next_logit;
    const int32_t* tokens = sampled.data() + next_logit;
    next_logit += static_cast<size_t>(s.num_logits_rows());
    Sequence* seq = find(s.seq_id);
    if (seq != nullptr) seq->in_flight = false;
    if (seq == nullptr || seq->status != SequenceStatus::running) continue;  // cancelled or stopped meanwhile
    if (s.num_draft_tokens > 0) {
      apply_verified(plan, s, first_row, *seq, tokens, t, events);
      continue;
    }
    // A shifted sequence's cache positions are not its tokens': nothing to index.
    if (seq->num_evicted_tokens == 0)
      kv_.commit_tokens(seq->seq_id, static_cast<uint32_t>(s.first_new_position),
                        seq->tokens.data() + s.first_new_position, static_cast<uint32_t>(s.num_new_tokens));
    seq->num_computed_tokens = s.first_new_position + s.num_new_tokens;
    const size_t first_event = events.size();
    if (seq->pending_row >= 0) {  // a step planned ahead holds this token as pending
      seq->tokens.pop_back();
      seq->pending_row = -1;
    }
    if (is_beam(*seq)) {
      if (s.num_samples > 0) beam_rows.push_back({seq->seq_id, first_row});
      continue;
    }
    if (s.num_samples == 1) observe_hidden(*seq, first_row, seq->num_tokens() - 1);
    if (s.num_samples == 1) apply_token(*seq, tokens[0], t, events);
    else if (s.num_samples > 1) fork_samples(*seq, tokens, t, events);
    // Sample k of a forking row took row first_row + k (plan.logits' order).
    for (size_t i = first_event; i < events.size(); ++i)
      if (events[i].token_id)
        events[i].logits_row = static_cast<int32_t>(first_row) + (s.num_samples > 1 ? events[i].index : 0);
  }
  step_hidden_ = {};
  if (!beam_rows.empty()) update_beams(beam_rows, details, t, events);
  return events;
}

std::vector<TokenEvent> Scheduler::fail_step(const StepPlan& plan, const std::string& error, ErrorCode code) {
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), plan.step_id), in_flight_.end());
  std::vector<TokenEvent> events;
  for (const ScheduledSeq& s : plan.seqs)
    if (Sequence* seq = find(s.seq_id)) seq->in_flight = false;
  for (const ScheduledSeq& s : plan.seqs)
    if (Sequence* seq = find(s.seq_id)) finish(*seq, FinishReason::error, std::nullopt, error, events);
  for (TokenEvent& e : events) e.error_code = code;
  return events;
}

void Scheduler::apply_token(Sequence& seq, int32_t token, TimePoint t, std::vector<TokenEvent>& events) {
  const FinishReason reason = seq.append_token(token, t);
  stats_.num_generated_tokens += 1;
  if (reason != FinishReason::none) {
    finish(seq, reason, token, "", events);
    return;
  }
  TokenEvent e;
  e.request_id = seq.request_id;
  e.index = seq.index;
  e.token_id = token;
  events.push_back(std::move(e));
}

// The prompt is prefilled: samples 1..n-1 become sequences sharing its KV,
// then every sample takes its own first token. A fork the allocator refuses
// sends that sample to the head of the queue, to be prefilled on its own.
void Scheduler::fork_samples(Sequence& parent, const int32_t* tokens, TimePoint t,
                             std::vector<TokenEvent>& events) {
  const int32_t n = parent.num_unforked_samples;
  parent.num_unforked_samples = 1;
  RequestState& state = requests_.at(parent.request_id);
  std::vector<Sequence*> children;
  for (int32_t k = 1; k < n; ++k) {
    auto child = std::make_unique<Sequence>(parent);
    child->seq_id = next_seq_id_++;
    child->index = k;
    state.seq_ids.push_back(child->seq_id);
    if (kv_.fork(parent.seq_id, child->seq_id)) {
      insert_running(child.get());
    } else {
      child->num_kv_tokens = 0;
      child->num_computed_tokens = 0;
      child->num_evicted_tokens = 0;
      child->num_cache_rows = 0;
      child->status = SequenceStatus::preempted;
    }
    children.push_back(child.get());
    seqs_.emplace(child->seq_id, std::move(child));
  }
  for (auto it = children.rbegin(); it != children.rend(); ++it)
    if ((*it)->status == SequenceStatus::preempted) waiting_.push_front(*it);
  for (int32_t k = 1; k < n; ++k) apply_token(*children[static_cast<size_t>(k - 1)], tokens[k], t, events);
  apply_token(parent, tokens[0], t, events);
}

void Scheduler::finish(Sequence& seq, FinishReason reason, std::optional<int32_t> token, const std::string& error,
                       std::vector<TokenEvent>& events) {
  if (beam_groups_.count(seq.request_id)) {  // a beam ends with its whole search
    end_beam_group(seq.request_id, reason, error, events);
    return;
  }
  if (seq.pending_row >= 0) {  // ended before the token planned ahead was sampled
    seq.tokens.pop_back();
    seq.pending_row = -1;
  }
  if (!seq.kv_export_key.empty()) export_handoff(seq, reason, error);
  if (proposer_) proposer_->release(seq.seq_id);
  if (seq.status == SequenceStatus::running) {
    remove_running(&seq);
    // A static batch keeps a member that ends early as padding until the
    // last one ends (cancelled and failed members leave at once).
    const bool pad = is_static_ && !running_.empty() && seq.num_computed_tokens > 0 &&
                     (reason == FinishReason::stop || reason == FinishReason::length);
    if (pad) {
      const int32_t last = seq.num_computed_tokens - 1;
      static_pads_.push_back({seq.seq_id, seq.tokens[static_cast<size_t>(last)], last});
    } else {
      kv_.free_seq(seq.seq_id);
    }
    if (running_.empty()) release_static_padding();
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &seq), waiting_.end());
  }
  seq.status = SequenceStatus::finished;
  seq.finish_reason = reason;
  seq.error = error;
  seq.finish_time = now();

  RequestState& state = requests_.at(seq.request_id);
  // An unforked sequence of an n > 1 request ends all n samples.
  const int32_t num_samples = seq.num_unforked_samples;
  for (int32_t k = 0; k < num_samples; ++k) {
    TokenEvent e;
    e.request_id = seq.request_id;
    e.index = num_samples > 1 ? k : seq.index;
    if (k == 0 && token) {
      e.token_id = token;
      e.is_stop_token = seq.is_stop_token(*token);
    }
    e.finished = true;
    e.finish_reason = reason;
    e.error = error;
    e.usage = seq.usage();
    e.timings = seq.timings();
    state.num_finished_samples += 1;
    e.request_done = state.num_finished_samples == state.num_samples;
    events.push_back(std::move(e));
  }
  const bool request_done = state.num_finished_samples == state.num_samples;
  const std::string request_id = seq.request_id;
  seqs_.erase(seq.seq_id);  // seq is gone from here on
  if (request_done) {
    requests_.erase(request_id);
    stats_.num_requests_finished += 1;
  }
}

Sequence* Scheduler::find(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const Sequence* Scheduler::sequence(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const Sequence* Scheduler::sample(const std::string& request_id, int32_t index) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return nullptr;
  for (uint64_t id : it->second.seq_ids) {
    const Sequence* seq = sequence(id);
    if (seq != nullptr && seq->index == index) return seq;
  }
  return nullptr;
}

bool Scheduler::has_work() const { return !waiting_.empty() || !running_.empty(); }

bool Scheduler::has_request(const std::string& request_id) const { return requests_.count(request_id) != 0; }

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  s.num_running = running_.size();
  s.num_waiting = 0;
  for (const Sequence* seq : waiting_) s.num_waiting += static_cast<uint64_t>(seq->num_unforked_samples);
  s.kv = kv_.usage();
  return s;
}

}  // namespace llmk
