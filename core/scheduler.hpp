// The Scheduler: which tokens of which sequences the next forward computes,
// and what the sampled tokens mean. A plain synchronous class (the scheduler
// actor is a thin shell around it); it owns every Sequence and drives the KV
// allocator, never the model.
//
// One step:   plan = schedule();  run plan.batch;  sample one token per
//             logits row;  events = update_from_output(plan, tokens).
// schedule() may not be called again before the plan's update_from_output
// (or fail_step): KV freed by a cancel is reused only by the next plan.
//
// Overlapped steps (scheduler.overlap): while step t computes, plan t+1 =
// schedule_ahead(plan t) plans the next step as if every sequence that step
// t gives a token continues. Its decode rows for them read the ids step t
// samples (StepBatch::fed_back, resolved by the executor on its device), so
// the host plans and stages step t+1 while the device computes step t, and
// the device never waits for the host between decode steps. A sequence
// whose token at step t ends it (EOS, a stop id, a stop string, a cancel)
// leaves its row of step t+1 unused: a wasted row, never a wrong token.
// Steps are updated in order: update_from_output(t), then (t+1).
// schedule_ahead never preempts: where a decode would need it, it plans
// nothing and the next schedule() (with nothing in flight) decides exactly
// as without overlap.
//
// Pipelined steps (SchedulerOptions::max_steps_in_flight = P > 1, for an
// executor whose stages each hold a step): schedule() may be called again
// while up to P - 1 plans await their update, and plans only sequences that
// are in none of them, so the steps in flight are disjoint (each of them a
// micro-batch, as vLLM's virtual engines keep theirs). A step takes at most
// ceil(running / P) decodes, so the running sequences spread over the P
// steps. With steps in flight it never preempts and never restores
// offloaded K/V: where a decode would need it, it plans what fits and
// admits nothing, and a schedule() with nothing in flight decides as
// usual. Updates still come in step order.
//
// Policies (SchedulerSection::policy):
//  - continuous: iteration-level batching with chunked prefill. Every step
//    first gives each running, fully prefilled sequence its decode token, then
//    continues partial prefills, then admits waiting sequences, all within
//    max_num_batched_tokens new tokens and max_num_seqs sequences (the
//    latter capped at max_num_batched_tokens, so the decodes always fit).
//    Admission reserves KV for the whole prompt (prompt + generated tokens
//    when resuming), so prefill chunks never allocate; a prefix-cache hit
//    (reserve's num_cached_tokens) is never computed.
//  - static: the classic baseline. When nothing runs, up to max_num_seqs
//    waiting sequences form a batch; it is prefilled (chunked) and then
//    decoded together until every member finishes; nothing is admitted
//    meanwhile, and no member decodes before every member is prefilled. As
//    a padded batch would, each decode step computes one row for every
//    member that has finished (its last position again, no KV written, no
//    logits: ScheduledSeq::is_padding) and counts it as a wasted slot, as
//    it counts a preempted member's slot. Prefill padding is counted, not
//    computed: at batch formation the difference between the longest
//    prompt and each member's prompt adds to num_padded_slots.
//
// No starvation: admission is strictly first come, first served. When the
// head of the waiting queue cannot be admitted (no KV space, no sequence
// slot), nothing behind it is admitted in this step, so later small requests
// never overtake it; running sequences only finish, so its turn comes.
// Preempted sequences return to the head of the queue (they are older).
//
// Preemption: when a decode cannot grow its KV, the youngest running
// sequence (latest arrival) not yet scheduled in this step gives up its KV and
// returns to the head of the waiting queue, keeping its generated tokens;
// repeat until the decode fits or the sequence is itself the youngest (then it
// is preempted). "recompute" re-prefills prompt + generated tokens later;
// "offload" saves its K/V through a KvOffloader and restores it on resume.
// A sequence that cannot fit with nothing else running is finished with an
// error. No admission happens in a step that preempted.
//
// Speculative decoding (SchedulerOptions::speculative, core/speculation.hpp):
// a decoding sequence of one sample (greedy or sampled: its rows' ids follow
// SamplerRow::draft_token's rule) may add k drafted tokens after its
// decode row, each row with logits; its KV grows by k more slots, from the
// token budget the step's other decodes leave. A decode never preempts for
// its own drafts: where the KV cannot hold them, it goes without (drafts
// planned earlier in the step may still take slots a later decode then
// lacks; it preempts as usual). The
// update accepts drafts while they equal the rows' sampled ids, emits those
// ids (accepted drafts, then the first disagreeing or the bonus one) with
// every stop condition applied token by token, commits the verified K/V
// only, and rolls the rest back (KvAllocator::truncate_seq). A plan with
// drafts is never followed by a plan made ahead, and none is made ahead.
//
// n > 1: the prompt is prefilled once; the step that completes it has n
// logits rows (the same batch row repeated), one per sample, and the sequence
// forks (KvAllocator::fork) into samples 0..n-1 that decode independently.
// A fork the allocator refuses sends that sample to the head of the queue; it
// is prefilled on its own later (prefix caching makes that cheap). The
// request is done when every sample has finished.
//
// Beam search (SamplingParams::beam_width = W, core/scheduler_beam.cpp,
// docs/beam_search.md): the prompt is prefilled once and its W logits rows
// list the best 2W tokens each; from then on the request's W beams are
// sequences forked from each other (KvAllocator::fork: shared K/V,
// copy-on-write where the allocator has it) that decode together, all in
// the same step or none. Each update keeps the best W continuations by
// cumulative log-probability: a beam no continuation chose is freed, one
// chosen k times goes on with one and forks k - 1 children. Finished
// hypotheses are kept by length-penalised score; when the search ends the
// best n come out as samples 0..n-1, all their tokens at once. A beam
// search is never preempted beam by beam: it restarts from its prompt
// (every beam freed, the search recomputed; its choices are deterministic).
// It needs the continuous policy, one step in flight, no speculation and no
// streaming window; a step with beams is never followed by a plan made ahead.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.hpp"
#include "core/kv_allocator.hpp"
#include "core/kv_handoff.hpp"
#include "core/kv_offloader.hpp"
#include "core/request.hpp"
#include "core/sequence.hpp"
#include "core/speculation.hpp"
#include "core/step.hpp"

namespace llmk {

class Proposer;
struct SampledToken;  // core/sampler.hpp
class MedusaProposer;

// Values the scheduler needs besides its config section.
struct SchedulerLimits {
  int32_t max_seq_len = 0;              // context limit: prompt + generated tokens
  std::vector<int32_t> eos_token_ids;   // the model's
  int32_t vocab_size = 0;               // > 0: prompt token ids are checked against it
};

// StreamingLLM (kv_cache.window, sink_tokens; core/scheduler_stream.cpp).
struct StreamWindow {
  int32_t window = 0;       // K/V rows a sequence keeps, sinks included; 0: off
  int32_t sink_tokens = 0;  // its first rows, never evicted
  int32_t evict_unit = 1;   // rows evicted at a time (kv_cache.block_size; a paged allocator's block)
};

struct SchedulerOptions {
  ClockFn clock{};                      // default: steady_clock::now
  KvOffloader* offloader = nullptr;     // required when preemption == "offload"
  // Steps schedule() may have in flight at once: the executor's
  // (Executor::max_steps_in_flight, a pipeline's stages). Ignored (1) by
  // the static policy.
  int32_t max_steps_in_flight = 1;
  // speculative.*: "none" decodes one token a step. Another method needs an
  // allocator that can roll back (KvAllocator::can_truncate) and the
  // continuous policy with one step in flight.
  SpeculativeSection speculative{};
  // The proposer of a method that needs a model (speculative.method draft:
  // build_engine_parts makes it); null: make_proposer(speculative).
  std::shared_ptr<Proposer> proposer{};
  // The executor's attention reads token trees (Executor::attends_token_trees):
  // with speculative.tree_width > 1 drafts are verified as trees, else chains.
  bool token_trees = false;
  // Prefill/decode disaggregation (core/kv_handoff.hpp): saves the K/V a
  // finished prefill hands off and restores what a handed-off sequence
  // brings (the executor; nullptr: no handoffs), and where exports go.
  // Exports are saved as their sequence ends, so they need a scheduler
  // whose updates run with no step in flight (no overlap, no pipeline).
  KvOffloader* kv_io = nullptr;
  KvHandoffBox* handoffs = nullptr;
  std::string kv_layout{};              // this engine's KvHandoff::layout
  // A window over every sequence's K/V (window 0: off). Needs an allocator
  // that evicts (KvAllocator::can_evict), the continuous policy and no
  // speculation; a sequence may then run past max_seq_len.
  StreamWindow stream{};
};

// A request's part in prefill/decode disaggregation (Request::kv_export_key,
// Request::kv_import).
struct SequenceHandoff {
  std::string export_key;
  std::shared_ptr<KvHandoff> import;
};

// One sequence of the batch, in batch order.
struct ScheduledSeq {
  uint64_t seq_id = 0;
  int32_t num_new_tokens = 0;   // its rows: batch.query_start[s] .. [s+1]
  int32_t first_new_position = 0;
  bool is_prefill = false;      // anything but the single newest generated token
  int32_t num_samples = 0;      // logits rows it owns: 0 (prefill continues), 1, or n when it forks
  // Static policy: a member that already finished, computed again (its last
  // position, KV not written, no logits) because its batch is padded to the
  // longest member. seq_id names the finished sequence, whose KV is held.
  bool is_padding = false;
  // Speculative: drafted tokens after the decode row, each a row with logits
  // (num_new_tokens = 1 + num_draft_tokens).
  int32_t num_draft_tokens = 0;
  // A token tree's drafts (num_draft_tokens of them): each node's parent,
  // -1 for the newest token (DraftTree); empty for a chain.
  std::vector<int32_t> draft_parents;
  int32_t num_logits_rows() const { return num_samples + num_draft_tokens; }
};

// A token (or an ending) for the detokenizer.
struct TokenEvent {
  std::string request_id;
  int32_t index = 0;
  std::optional<int32_t> token_id;       // absent when a sample ends without a token (cancel, error)
  int32_t logits_row = -1;               // with token_id: the step's logits row it was sampled from
  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  bool is_stop_token = false;            // the token is an EOS / stop id: not part of the text
  std::optional<BeamScore> beam;         // a beam search hypothesis' final event: its scores
  std::string error;                     // finish_reason == error
  ErrorCode error_code = ErrorCode::internal;  // finish_reason == error: its category (peer_lost: 503)
  Usage usage;                           // on finished events
  Timings timings;                       // on finished events
  bool request_done = false;             // every sample of the request has finished
};

// What the sampler needs for each logits row.
struct LogitsTarget {
  uint64_t seq_id = 0;
  std::string request_id;
  int32_t sample_index = 0;     // sample the token is for (0..n-1 on a forking row)
  std::shared_ptr<const SamplingParams> sampling;  // seed always set
  uint64_t request_key = 0;     // Sequence::request_key: the request as a number
  int32_t num_generated = 0;    // tokens the sample has generated before this row's
  // Speculative: the draft fed on the next row, which (with every later row
  // of its sequence) counts only if this row's id equals it; -1 otherwise.
  int32_t draft_token = -1;
  // Speculative token trees: the logits row (in this plan's logits) of this
  // node's parent, whose id must equal tree_token (the node's own token) for
  // the node's id to count; -1 outside trees. Tree rows verify no draft
  // (draft_token -1): each draws from its row as plain decoding does, and
  // the path follows the drawn ids (core/speculation.hpp, accepted_path).
  int32_t tree_parent = -1;
  int32_t tree_token = -1;
  DraftProbs draft_probs = nullptr;  // the distribution draft_token was drawn from; null: proposed with certainty
};

struct StepPlan {
  uint64_t step_id = 0;
  StepBatch batch;
  std::vector<ScheduledSeq> seqs;        // [batch.num_seqs()]
  std::vector<LogitsTarget> logits;      // [batch.num_logits()]
  // Final events of sequences finished while planning (they cannot fit in
  // the KV cache even alone): hand them to the detokenizer.
  std::vector<TokenEvent> events;
  bool empty() const { return seqs.empty(); }
};

struct SchedulerStats {
  uint64_t num_running = 0;              // sequences holding KV
  uint64_t num_waiting = 0;              // queued or preempted, counting unforked samples
  uint64_t num_requests_total = 0;
  uint64_t num_requests_finished = 0;
  uint64_t num_prompt_tokens = 0;        // submitted
  uint64_t num_cached_prompt_tokens = 0; // prefix-cache hits at admission
  uint64_t num_prefill_tokens = 0;       // prefill tokens actually computed (recompute included)
  uint64_t num_generated_tokens = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_offloads = 0;             // preemptions saved to host
  uint64_t num_restores = 0;
  uint64_t num_offload_recomputes = 0;   // resumed by recompute: the step had pending KV copies
  double offload_seconds = 0;            // time in KvOffloader calls
  uint64_t num_steps = 0;
  uint64_t num_batch_seqs = 0;           // summed over steps
  uint64_t num_batch_tokens = 0;
  uint64_t num_padded_slots = 0;         // static policy: idle slots and padded prefill tokens
  uint64_t peak_running = 0;
  uint64_t peak_steps_in_flight = 0;     // plans awaiting their update at once
  uint64_t num_handoffs_exported = 0;    // prefills whose K/V went to KvHandoffBox
  uint64_t num_handoffs_imported = 0;    // sequences started from a handed-off K/V
  uint64_t num_spec_drafts = 0;          // decodes that verified drafts (vLLM's num_drafts)
  uint64_t num_spec_draft_tokens = 0;    // drafted tokens verified
  uint64_t num_spec_accepted_tokens = 0; // of those, accepted
  uint64_t num_evicted_tokens = 0;       // K/V rows that left a streaming window
  llmk_kv_usage kv{};
  double mean_batch_seqs() const { return num_steps ? double(num_batch_seqs) / double(num_steps) : 0.0; }
  double mean_batch_tokens() const { return num_steps ? double(num_batch_tokens) / double(num_steps) : 0.0; }
};

class Scheduler {
 public:
  // Throws Error(invalid_config) for an unknown policy or preemption mode, or
  // offload without an offloader. The allocator must outlive the scheduler.
  Scheduler(const SchedulerSection& config, const SchedulerLimits& limits, KvAllocator& kv,
            SchedulerOptions options = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request: the one place where the engine decides admission.
  // Throws Error(invalid_argument) for an empty prompt, a prompt with no room
  // for one generated token (with strict_context: no room for max_tokens),
  // bad n / max_tokens or other sampling values (validate_sampling_params),
  // token ids outside the vocabulary or a live duplicate id;
  // Error(overloaded) when max_queue requests already wait. The sequences'
  // sampling params carry a resolved seed (resolve_seed), so samples and
  // resumed sequences draw consistently.
  // With a handoff: an export (one sample; its K/V is saved and left in
  // SchedulerOptions::handoffs when it ends), or an import whose prompt is
  // prompt_token_ids and whose layout, block size and first token must
  // match this engine (else Error(invalid_argument) naming what differs).
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                   const SamplingParams& sampling, bool strict_context = false, SequenceHandoff handoff = {});
  // Cancels a live request: frees its KV at once and returns one final event
  // (cancelled) per unfinished sample. Empty when the id is unknown.
  std::vector<TokenEvent> abort_request(const std::string& request_id);
  // Ends one sample (a stop string the detokenizer found); frees its KV.
  // Empty when the sample already finished or is unknown.
  std::vector<TokenEvent> finish_request(const std::string& request_id, int32_t index,
                                         FinishReason reason = FinishReason::stop);

  // Plans the next step; a plan with no sequences when there is nothing to
  // run (its events may still hold finished sequences). Pipelined, also
  // while fewer than max_steps_in_flight() plans are in flight.
  StepPlan schedule();
  int32_t max_steps_in_flight() const { return max_steps_in_flight_; }
  int32_t steps_in_flight() const { return static_cast<int32_t>(in_flight_.size()); }
  // Plans the step after `in_flight`, the one step in flight (see above).
  // Returns an empty plan, changing nothing, when it cannot: the static
  // policy, a step in flight that forks samples or pads, a decode that would
  // need a preemption, or nothing to run.
  StepPlan schedule_ahead(const StepPlan& in_flight);
  // sampled[i] is the token for plan.logits[i]. Advances KV, appends tokens,
  // applies stop conditions, frees finished sequences, returns their events.
  // A plan with beam search rows needs `details` (the sampler's output for
  // every row, [plan.logits.size()]): each beam row's top log-probabilities.
  // `hidden` holds the step's final-RMSNorm hidden rows, [plan.logits.size(),
  // hidden_size] (Executor::copy_hidden_rows; empty where the executor kept
  // none), for a proposer that reads them (Medusa heads): each speculating
  // sequence's row of its newest verified position goes to it.
  std::vector<TokenEvent> update_from_output(const StepPlan& plan, const std::vector<int32_t>& sampled,
                                             const std::vector<SampledToken>* details = nullptr,
                                             std::span<const float> hidden = {});
  std::vector<TokenEvent> update_from_output(const StepPlan& plan, const std::vector<int32_t>& sampled,
                                             std::span<const float> hidden) {
    return update_from_output(plan, sampled, nullptr, hidden);
  }
  // Whether update_from_output wants the step's hidden rows.
  bool reads_hidden_rows() const { return medusa_ != nullptr; }
  // The forward or the sampler failed: every sequence of the plan finishes
  // with an error of category `code`.
  std::vector<TokenEvent> fail_step(const StepPlan& plan, const std::string& error,
                                    ErrorCode code = ErrorCode::internal);

  bool has_work() const;                 // something waits or runs
  bool has_request(const std::string& request_id) const;
  const Sequence* sequence(uint64_t seq_id) const;  // nullptr once finished
  // A live sample; before an n > 1 request forks, sample 0 stands for all.
  const Sequence* sample(const std::string& request_id, int32_t index) const;
  SchedulerStats stats() const;

 private:
  struct RequestState {
    int32_t num_samples = 1;
    int32_t num_finished_samples = 0;
    std::vector<uint64_t> seq_ids;       // every sequence it ever had
  };

  // A beam search (scheduler_beam.cpp).
  struct BeamHypothesis {
    std::vector<int32_t> tokens;         // generated, the final EOS / stop id included
    double cumulative_logprob = 0;
    double score = 0;
    FinishReason reason = FinishReason::none;
    Usage usage;
    Timings timings;
  };
  struct BeamGroup {
    int32_t width = 1;
    int32_t num_outputs = 1;             // the request's n
    float length_penalty = 1.0f;
    EarlyStopping early_stopping = EarlyStopping::heuristic;
    StopConditions stop;
    std::vector<uint64_t> beams;         // live beam sequences; the prompt's alone before the first step
    std::vector<double> cumulative;      // [beams] cumulative log-probability
    std::vector<BeamHypothesis> finished;  // the best `width` so far, unordered
    // Rows the sampler has seen per sample slot 0..width-1 (its history's
    // length, which it checks; a beam's row takes its slot's count).
    std::vector<int32_t> slot_rows;
  };
  struct BeamRow {
    uint64_t seq_id;
    size_t first_row;                    // its first logits row in the plan
  };
  enum class BeamDecode { planned, stop, wait };

  TimePoint now() const { return clock_(); }
  Sequence* find(uint64_t seq_id);
  // scheduler_plan.cpp: the three phases of a step, preemption, batch rows.
  bool any_running_prefill() const;
  StepPlan begin_plan();
  void end_plan(StepPlan& plan);
  // may_preempt false (planning ahead): returns false, having planned only
  // part of the decodes, where one would need a preemption.
  bool schedule_decodes(StepPlan& plan, int32_t& budget, bool& preempted, bool may_preempt = true);
  void schedule_prefills(StepPlan& plan, int32_t& budget);
  void admit_waiting(StepPlan& plan, int32_t& budget);
  void restore_offloaded(Sequence& seq, uint32_t num_cached_tokens);
  void preempt(Sequence& seq);
  // scheduler_handoff.cpp: prefill/decode disaggregation.
  void check_handoff(const Sequence& seq, const SequenceHandoff& handoff) const;
  void import_handoff(Sequence& seq, KvHandoff& handoff);
  // At admission: a handed-off sequence's first token, as an event (false)
  // or as its end when the token ends it (true: the sequence is gone).
  bool announce_handoff_token(Sequence& seq, std::vector<TokenEvent>& events);
  void export_handoff(const Sequence& seq, FinishReason reason, const std::string& error);
  void add_to_batch(StepPlan& plan, Sequence& seq, int32_t num_new_tokens);
  void add_static_padding(StepPlan& plan, int32_t& budget);
  void release_static_padding();
  void finalize_batch(StepPlan& plan);
  void insert_running(Sequence* seq);
  void remove_running(Sequence* seq);
  // scheduler_speculation.cpp: drafts, their rows, their verification.
  void init_speculation(const SpeculativeSection& config, std::shared_ptr<Proposer> proposer, bool token_trees);
  // StreamingLLM (core/scheduler_stream.cpp).
  void init_stream(const StreamWindow& stream);
  bool streaming() const { return stream_.window > 0; }
  int32_t stream_chunk_limit() const;  // most new tokens of one sequence in a step
  int32_t cache_position(const Sequence& seq, int32_t position) const;
  // Evicts and extends so the cache holds the sequence's rows up to text
  // position `end` (exclusive); false when the allocator has no room.
  bool make_room(Sequence& seq, int32_t end, std::vector<llmk_kv_copy>& copies);
  bool may_speculate(const Sequence& seq) const;
  bool any_may_speculate(const StepPlan& plan);
  int32_t num_pending_decodes() const;
  bool may_draft_tree(const Sequence& seq) const;
  void draft_for_step(int32_t max_drafts);
  void propose_drafts(const Sequence& seq, int32_t max_drafts, DraftTree& drafts);
  void add_draft_rows(StepPlan& plan, Sequence& seq, const DraftTree& drafts);
  void add_tree_rows(StepPlan& plan, Sequence& seq, const DraftTree& tree);
  void set_tree_parents(StepPlan& plan);
  void apply_verified(const StepPlan& plan, const ScheduledSeq& s, size_t first_row, Sequence& seq,
                      const int32_t* sampled, TimePoint t, std::vector<TokenEvent>& events);
  void apply_verified_tree(const StepPlan& plan, const ScheduledSeq& s, size_t first_row, Sequence& seq,
                           const int32_t* sampled, TimePoint t, std::vector<TokenEvent>& events);
  // scheduler_beam.cpp: beam search.
  bool is_beam(const Sequence& seq) const { return seq.sampling && seq.sampling->beam_width > 0; }
  void add_beam_request(const std::string& request_id, Sequence& root, const SamplingParams& sampling,
                        const SequenceHandoff& handoff);
  int32_t logits_row_history(const Sequence& seq, int32_t sample_index) const;
  BeamDecode schedule_beam_decodes(StepPlan& plan, int32_t& budget, bool& preempted, bool may_preempt,
                                   Sequence& first);
  void update_beams(const std::vector<BeamRow>& rows, const std::vector<SampledToken>* details, TimePoint t,
                    std::vector<TokenEvent>& events);
  void step_beam_group(BeamGroup& group, const std::string& request_id, const std::vector<const BeamRow*>& rows,
                       const std::vector<SampledToken>& details, TimePoint t, std::vector<TokenEvent>& events);
  void add_hypothesis(BeamGroup& group, const Sequence& beam, std::optional<int32_t> token, double cumulative,
                      FinishReason reason, TimePoint t);
  bool beam_search_done(const BeamGroup& group, double best_cumulative, int32_t generated) const;
  void drop_beam(Sequence& seq);
  void restart_beam_group(const std::string& request_id);
  // Ends a beam search: its best hypotheses as events (reason none), or one
  // ending of `reason` per output (a cancel, an error).
  void end_beam_group(const std::string& request_id, FinishReason reason, const std::string& error,
                      std::vector<TokenEvent>& events);
  // Hands the proposer seq's hidden row `row` (of the step being updated)
  // as that of position `position`: Medusa heads read it next step.
  void observe_hidden(const Sequence& seq, size_t row, int32_t position);
  // scheduler.cpp: tokens and endings.
  void apply_token(Sequence& seq, int32_t token, TimePoint t, std::vector<TokenEvent>& events);
  void fork_samples(Sequence& parent, const int32_t* tokens, TimePoint t, std::vector<TokenEvent>& events);
  // Frees the sequence's KV, emits its final event(s) and destroys it.
  void finish(Sequence& seq, FinishReason reason, std::optional<int32_t> token, const std::string& error,
              std::vector<TokenEvent>& events);

  SchedulerSection config_;
  SchedulerLimits limits_;
  KvAllocator& kv_;
  ClockFn clock_;
  KvOffloader* offloader_ = nullptr;    // offload preemption
  KvOffloader* kv_io_ = nullptr;        // handoffs, and restoring what offload saved
  KvHandoffBox* handoffs_ = nullptr;
  std::string kv_layout_;
  bool is_static_ = false;
  int32_t max_num_seqs_ = 0;             // min(max_num_seqs, max_num_batched_tokens): decodes always fit
  int32_t max_num_batched_tokens_ = 0;
  int32_t max_steps_in_flight_ = 1;
  std::shared_ptr<Proposer> proposer_;   // null: no speculation
  MedusaProposer* medusa_ = nullptr;     // proposer_ where it reads hidden rows
  std::span<const float> step_hidden_;   // the hidden rows of the step being updated
  size_t step_hidden_size_ = 0;          // floats per row of step_hidden_
  StreamWindow stream_{};                // window 0: every row kept
  int32_t num_speculative_tokens_ = 0;
  uint32_t spec_max_batch_size_ = 0;     // speculative.max_batch_size
  int32_t spec_tree_nodes_ = 0;          // most nodes of a draft tree; 0: chains only
  bool spec_sampled_drafts_ = false;     // speculative.draft_sampling sampled
  std::unordered_map<uint64_t, DraftTree> step_drafts_;  // the plan's drafts, by sequence
  std::unordered_map<uint64_t, std::vector<DraftProbs>> step_draft_probs_;  // their q where drawn (chains), by sequence

  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;  // live sequences
  std::unordered_map<std::string, RequestState> requests_;         // live requests
  std::unordered_map<std::string, BeamGroup> beam_groups_;         // live beam searches, by request
  std::deque<Sequence*> waiting_;        // admission order (preempted ones at the head)
  std::vector<Sequence*> running_;       // oldest first: (arrival_order, index)
  std::vector<std::vector<int32_t>> step_tables_;  // block tables of the plan being built
  // Static policy: members that finished before their batch. Like a fixed
  // batch padded to its longest member, each keeps its KV and costs one row
  // per step until the batch drains.
  struct StaticPad {
    uint64_t seq_id;
    int32_t token;     // at `position`, the last one computed
    int32_t position;
  };
  std::vector<StaticPad> static_pads_;

  uint64_t next_seq_id_ = 1;
  uint64_t next_arrival_order_ = 0;
  uint64_t next_step_id_ = 1;
  std::deque<uint64_t> in_flight_;       // plans awaiting update_from_output, oldest first
  // KV copies of extends made for an ahead plan that was then given up: the
  // next plan applies them first (the allocator has already moved the slots).
  std::vector<llmk_kv_copy> carried_copies_;
  // Sequences whose verified tree K/V the carried copies still move: an
  // offload preemption before a plan applies them resumes by recompute.
  std::vector<uint64_t> kv_moved_seqs_;
  bool planning_ahead_ = false;          // inside schedule_ahead()
  int32_t static_batch_size_ = 0;        // static policy: samples in the current batch
  SchedulerStats stats_;
};

}  // namespace llmk
