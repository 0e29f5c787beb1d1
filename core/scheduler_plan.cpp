// Scheduler, the planning half: the three phases of a step (decodes, partial
// prefills, admissions), preemption, and the flattened batch rows.
#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "core/scheduler.hpp"

namespace llmk {
namespace {

// A decode: the sequence gained a token since its KV was sized.
bool needs_decode(const Sequence& seq) { return seq.num_kv_tokens < seq.num_tokens(); }

bool older(const Sequence* a, const Sequence* b) {
  return a->arrival_order != b->arrival_order ? a->arrival_order < b->arrival_order : a->index < b->index;
}

std::string describe(const Sequence& seq) {
  return "request '" + seq.request_id + "' sample " + std::to_string(seq.index);
}

}  // namespace

StepPlan Scheduler::schedule() {
  if (static_cast<int32_t>(in_flight_.size()) >= max_steps_in_flight_)
    throw Error(ErrorCode::internal, "Scheduler::schedule: step " + std::to_string(in_flight_.front()) +
                                         " has not been passed to update_from_output");
  StepPlan plan = begin_plan();
  int32_t budget = max_num_batched_tokens_;
  bool preempted = false;
  if (running_.empty()) {  // the static batch drained
    static_batch_size_ = 0;
    release_static_padding();
  }
  // Static batches decode only once every member is prefilled.
  if (!is_static_ || !any_running_prefill()) {
    // Beside steps in flight (pipelined) a decode that does not fit waits
    // for them; admitting anything meanwhile would take the KV it needs.
    if (!schedule_decodes(plan, budget, preempted, /*may_preempt=*/in_flight_.empty())) preempted = true;
    if (is_static_) add_static_padding(plan, budget);
  }
  schedule_prefills(plan, budget);
  if (!preempted) admit_waiting(plan, budget);
  end_plan(plan);
  return plan;
}

StepPlan Scheduler::schedule_ahead(const StepPlan& in_flight) {
  if (is_static_ || in_flight_.size() != 1 || in_flight_.front() != in_flight.step_id) return {};
  for (const ScheduledSeq& s : in_flight.seqs) {
    if (s.num_samples > 1 || s.is_padding || s.num_draft_tokens > 0) return {};
    // A beam's next token is the beam search's choice, made at the update.
    if (const Sequence* seq = find(s.seq_id); seq != nullptr && is_beam(*seq)) return {};
  }
  // A sequence that may draft decodes in a plan made after its update.
  if (proposer_ && any_may_speculate(in_flight)) return {};
  // A KV restore writes the device's KV memory from the host: it waits for
  // a step with nothing in flight.
  if (!waiting_.empty() && waiting_.front()->num_offloaded_tokens > 0) return {};

  // Step t's work taken as done: each of its sequences has computed its
  // rows, and one that samples a token (and goes on, whatever the token)
  // holds it as a pending token, fed back from its logits row.
  struct Saved {
    Sequence* seq;
    int32_t num_computed_tokens, num_kv_tokens;
  };
  std::vector<Saved> saved;
  int32_t row = 0;
  for (const ScheduledSeq& s : in_flight.seqs) {
    const int32_t first_row = row;
    row += s.num_samples;
    Sequence* seq = find(s.seq_id);
    if (seq == nullptr || seq->status != SequenceStatus::running) continue;
    saved.push_back({seq, seq->num_computed_tokens, seq->num_kv_tokens});
    seq->num_computed_tokens = s.first_new_position + s.num_new_tokens;
    if (s.num_samples == 1 && !seq->next_token_ends()) {
      seq->tokens.push_back(0);
      seq->pending_row = first_row;
    }
  }
  auto undo = [&saved] {
    for (const Saved& s : saved) {
      if (s.seq->pending_row >= 0) s.seq->tokens.pop_back();
      s.seq->pending_row = -1;
      s.seq->num_computed_tokens = s.num_computed_tokens;
      s.seq->num_kv_tokens = s.num_kv_tokens;
    }
  };

  StepPlan plan = begin_plan();
  int32_t budget = max_num_batched_tokens_;
  bool preempted = false;
  planning_ahead_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{planning_ahead_};
  if (!schedule_decodes(plan, budget, preempted, /*may_preempt=*/false)) {
    // Extends already made stay (the allocator holds the slots; extending
    // again to the same length is a no-op), and so must their copies.
    carried_copies_ = std::move(plan.batch.kv_copies);
    step_tables_.clear();
    undo();
    return {};
  }
  schedule_prefills(plan, budget);
  admit_waiting(plan, budget);
  end_plan(plan);
  if (plan.empty()) undo();
  return plan;
}

StepPlan Scheduler::begin_plan() {
  StepPlan plan;
  plan.step_id = next_step_id_++;
  plan.batch.block_size = static_cast<int32_t>(kv_.block_size());
  plan.batch.query_start.push_back(0);
  plan.batch.kv_copies = std::move(carried_copies_);
  carried_copies_.clear();
  step_tables_.clear();
  return plan;
}

void Scheduler::end_plan(StepPlan& plan) {
  finalize_batch(plan);
  if (!plan.empty()) {
    kv_moved_seqs_.clear();  // this plan applies the copies that move them
    in_flight_.push_back(plan.step_id);
    stats_.num_steps += 1;
    stats_.num_batch_seqs += static_cast<uint64_t>(plan.seqs.size());
    stats_.num_batch_tokens += static_cast<uint64_t>(plan.batch.num_tokens());
  } else if (!plan.batch.kv_copies.empty()) {
    carried_copies_ = std::move(plan.batch.kv_copies);  // nothing runs: the next plan applies them
  }
  stats_.peak_running = std::max<uint64_t>(stats_.peak_running, running_.size());
  stats_.peak_steps_in_flight = std::max<uint64_t>(stats_.peak_steps_in_flight, in_flight_.size());
}

bool Scheduler::any_running_prefill() const {
  return std::any_of(running_.begin(), running_.end(), [](const Sequence* s) { return !needs_decode(*s); });
}

// Phase 1: one token for every running sequence that has finished its
// prefill, oldest first, growing its KV by one slot. When the allocator is
// full, the youngest running sequence not yet scheduled is preempted.
bool Scheduler::schedule_decodes(StepPlan& plan, int32_t& budget, bool& preempted, bool may_preempt) {
  int32_t num_decodes = 0;
  // Pipelined: the running sequences spread over the steps in flight.
  const auto per_step = static_cast<int32_t>((running_.size() + static_cast<size_t>(max_steps_in_flight_) - 1) /
                                             static_cast<size_t>(max_steps_in_flight_));
  // Drafts take only the budget the decodes still to plan leave.
  int32_t num_decodes_left = proposer_ ? num_pending_decodes() : 0;
  if (proposer_) draft_for_step(budget - num_decodes_left);
  DraftTree drafts;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* seq = running_[i];
    if (!needs_decode(*seq) || seq->in_flight) continue;
    if (num_decodes == per_step) break;
    if (is_beam(*seq)) {  // a beam search's beams decode together (scheduler_beam.cpp)
      if (seq->last_step_id == plan.step_id) continue;
      const int32_t before = plan.batch.num_seqs();
      const BeamDecode r = schedule_beam_decodes(plan, budget, preempted, may_preempt, *seq);
      if (r == BeamDecode::wait) return false;
      if (r == BeamDecode::stop) break;  // the search left running_, the youngest there
      num_decodes += plan.batch.num_seqs() - before;
      continue;
    }
    drafts.clear();
    if (proposer_) propose_drafts(*seq, budget - num_decodes_left--, drafts);
    std::vector<llmk_kv_copy> copies;
    bool fits = false;
    auto grow = [&] {
      if (streaming()) return make_room(*seq, seq->num_tokens(), copies);
      return kv_.extend(seq->seq_id, static_cast<uint32_t>(seq->num_tokens() + drafts.size()), copies);
    };
    while (!(fits = grow())) {
      copies.clear();
      if (!drafts.empty()) {  // a decode never preempts for its own drafts
        drafts.clear();
        continue;
      }
      if (!may_preempt) return false;
      if (!static_pads_.empty()) {  // padding gives way before any live member does
        release_static_padding();
        continue;
      }
      if (running_.size() == 1) {  // alone, and still too long: it can never run
        finish(*seq, FinishReason::error, std::nullopt,
               describe(*seq) + ": " + std::to_string(seq->num_tokens()) +
                   " tokens do not fit in the KV cache even with nothing else running",
               plan.events);
        break;
      }
      Sequence* victim = running_.back();
      preempt(*victim);
      preempted = true;
      if (victim == seq) break;
    }
    if (!fits) break;  // seq left running_; it was the youngest, so the loop is done
    seq->num_kv_tokens = seq->num_tokens();
    plan.batch.kv_copies.insert(plan.batch.kv_copies.end(), copies.begin(), copies.end());
    add_to_batch(plan, *seq, 1);
    budget -= 1;
    num_decodes += 1;
    if (!drafts.empty()) {
      add_draft_rows(plan, *seq, drafts);
      budget -= drafts.size();
    }
  }
  if (is_static_) stats_.num_padded_slots += static_cast<uint64_t>(std::max(0, static_batch_size_ - num_decodes));
  return true;
}

// Phase 2: running sequences whose prefill (prompt, or prompt + generated
// tokens after a recompute preemption) is incomplete, oldest first.
void Scheduler::schedule_prefills(StepPlan& plan, int32_t& budget) {
  for (Sequence* seq : running_) {
    if (budget == 0 || static_cast<int32_t>(plan.seqs.size()) >= max_num_seqs_) return;
    // Nothing uncomputed: planning ahead, a sequence whose token in flight ends it.
    if (needs_decode(*seq) || seq->in_flight || seq->last_step_id == plan.step_id ||
        seq->num_uncomputed_tokens() == 0)
      continue;
    const int32_t chunk = std::min({seq->num_uncomputed_tokens(), budget, stream_chunk_limit()});
    if (streaming()) {  // a streaming prefill takes its slots chunk by chunk
      std::vector<llmk_kv_copy> copies;
      const bool fits = make_room(*seq, seq->num_computed_tokens + chunk, copies);
      plan.batch.kv_copies.insert(plan.batch.kv_copies.end(), copies.begin(), copies.end());
      if (!fits) continue;  // waits for slots that running sequences free
    }
    add_to_batch(plan, *seq, chunk);
    budget -= chunk;
  }
}

// Phase 3: admit from the head of the queue while the KV cache, the token
// budget and the sequence limit allow. Strict FCFS: the first request that
// cannot be admitted stops admission for this step.
void Scheduler::admit_waiting(StepPlan& plan, int32_t& budget) {
  if (is_static_ && !running_.empty()) return;
  const bool forming_static_batch = is_static_;
  int32_t num_seq_slots = 0;
  for (const Sequence* s : running_) num_seq_slots += s->num_unforked_samples;
  int32_t longest_prompt = 0;
  std::vector<int32_t> admitted_lengths;

  // A static batch is formed whole (up to max_num_seqs members), whatever
  // the token budget: members whose prompt does not fit this step are
  // prefilled by later steps before the batch starts decoding.
  while (!waiting_.empty() && (budget > 0 || forming_static_batch)) {
    Sequence* seq = waiting_.front();
    if (seq->announce_first_token && seq->handoff_finish != FinishReason::none) {
      waiting_.pop_front();  // handed off with a first token that ends it: nothing to compute
      announce_handoff_token(*seq, plan.events);
      continue;
    }
    if (num_seq_slots + seq->num_unforked_samples > max_num_seqs_) break;
    // A KV restore writes device memory from the host: not while a step computes.
    if ((planning_ahead_ || !in_flight_.empty()) && seq->num_offloaded_tokens > 0) break;
    llmk_kv_reserve_args args{};
    args.seq_id = seq->seq_id;
    args.tokens = seq->tokens.data();
    args.num_tokens = static_cast<uint32_t>(seq->num_tokens());
    args.max_total_tokens = static_cast<uint32_t>(std::max(seq->max_total_tokens(), seq->num_tokens()));
    if (streaming()) {  // the cache never holds more than the window
      args.num_tokens = std::min<uint32_t>(args.num_tokens, static_cast<uint32_t>(stream_.window));
      args.max_total_tokens = std::min<uint32_t>(args.max_total_tokens, static_cast<uint32_t>(stream_.window));
    }
    uint32_t num_cached = 0;
    if (!kv_.reserve(args, &num_cached)) {
      // Wait for running sequences to free KV; planning ahead, the step in
      // flight may still end some.
      if (!running_.empty() || planning_ahead_) break;
      waiting_.pop_front();
      finish(*seq, FinishReason::error, std::nullopt,
             describe(*seq) + ": " + std::to_string(seq->num_tokens()) +
                 " tokens do not fit in the KV cache even with nothing else running",
             plan.events);
      continue;
    }
    waiting_.pop_front();
    num_cached = std::min<uint32_t>(num_cached, args.num_tokens - 1);  // one token is always computed
    const bool first_admission = seq->first_scheduled_time == TimePoint{};
    if (first_admission) {
      seq->first_scheduled_time = now();
      seq->num_cached_tokens = static_cast<int32_t>(num_cached);
      stats_.num_cached_prompt_tokens += num_cached;
    }
    seq->num_kv_tokens = seq->num_tokens();
    seq->num_computed_tokens = static_cast<int32_t>(num_cached);
    seq->num_evicted_tokens = 0;
    seq->num_cache_rows = static_cast<int32_t>(args.num_tokens);
    if (seq->num_offloaded_tokens > 0) {
      // A restore must not race the step's pending copies (a copy's source
      // may be a slot just freed by a relocation): resume by recompute then.
      if (plan.batch.kv_copies.empty()) {
        restore_offloaded(*seq, num_cached);
      } else {
        seq->offloaded_blocks.clear();
        seq->num_offloaded_tokens = 0;
        stats_.num_offload_recomputes += 1;
      }
    }
    seq->status = SequenceStatus::running;
    insert_running(seq);
    if (seq->announce_first_token) announce_handoff_token(*seq, plan.events);
    num_seq_slots += seq->num_unforked_samples;
    if (forming_static_batch) {
      static_batch_size_ += seq->num_unforked_samples;
      longest_prompt = std::max(longest_prompt, seq->num_tokens());
      admitted_lengths.push_back(seq->num_tokens());
    }
    // Within what admission reserved: a streaming prefill grows later (schedule_prefills).
    const int32_t chunk = std::min({seq->num_uncomputed_tokens(), budget,
                                    seq->num_cache_rows - seq->num_computed_tokens});
    if (chunk > 0 && static_cast<int32_t>(plan.seqs.size()) < max_num_seqs_) {
      add_to_batch(plan, *seq, chunk);
      budget -= chunk;
    }
  }
  for (int32_t len : admitted_lengths) stats_.num_padded_slots += static_cast<uint64_t>(longest_prompt - len);
}

// Offload resume: write back the saved blocks the prefix cache did not
// already provide.
void Scheduler::restore_offloaded(Sequence& seq, uint32_t num_cached_tokens) {
  const auto start = SteadyClock::now();
  const int32_t block = static_cast<int32_t>(kv_.block_size());
  std::vector<int32_t> table;
  kv_.block_table(seq.seq_id, table);
  for (size_t b = 0; b < seq.offloaded_blocks.size(); ++b) {
    const int32_t first = static_cast<int32_t>(b) * block;
    if (first < static_cast<int32_t>(num_cached_tokens)) continue;
    const int32_t last = std::min(first + block, seq.num_offloaded_tokens);
    std::vector<int32_t> slots;
    for (int32_t p = first; p < last; ++p) slots.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
    kv_io_->restore_kv(slots, seq.offloaded_blocks[b]);
  }
  seq.num_computed_tokens = std::max(seq.num_computed_tokens, seq.num_offloaded_tokens);
  seq.offloaded_blocks.clear();
  seq.num_offloaded_tokens = 0;
  stats_.num_restores += 1;
  stats_.offload_seconds += std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Frees the sequence's KV (saving it first in offload mode) and puts it at
// the head of the queue with its generated tokens.
void Scheduler::preempt(Sequence& seq) {
  if (is_beam(seq)) {  // a beam search restarts whole
    restart_beam_group(seq.request_id);
    return;
  }
  // A shifted sequence's rows are not its positions: it resumes by recompute.
  const bool kv_moving =
      std::find(kv_moved_seqs_.begin(), kv_moved_seqs_.end(), seq.seq_id) != kv_moved_seqs_.end();
  if (offloader_ != nullptr && seq.num_computed_tokens > 0 && seq.num_evicted_tokens == 0 && !kv_moving) {
    const auto start = SteadyClock::now();
    const int32_t block = static_cast<int32_t>(kv_.block_size());
    std::vector<int32_t> table;
    kv_.block_table(seq.seq_id, table);
    seq.offloaded_blocks.clear();
    for (int32_t first = 0; first < seq.num_computed_tokens; first += block) {
      const int32_t last = std::min(first + block, seq.num_computed_tokens);
      std::vector<int32_t> slots;
      for (int32_t p = first; p < last; ++p) slots.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
      seq.offloaded_blocks.push_back(offloader_->save_kv(slots));
    }
    seq.num_offloaded_tokens = seq.num_computed_tokens;
    stats_.num_offloads += 1;
    stats_.offload_seconds += std::chrono::duration<double>(SteadyClock::now() - start).count();
  }
  kv_.free_seq(seq.seq_id);
  remove_running(&seq);
  seq.num_kv_tokens = 0;
  seq.num_computed_tokens = 0;
  seq.num_evicted_tokens = 0;
  seq.num_cache_rows = 0;
  seq.status = SequenceStatus::preempted;
  waiting_.push_front(&seq);
  stats_.num_preemptions += 1;
}

// Appends rows for tokens [num_computed, num_computed + num_new_tokens). A
// decode is the single newest generated token; anything else is prefill.
void Scheduler::add_to_batch(StepPlan& plan, Sequence& seq, int32_t num_new_tokens) {
  StepBatch& batch = plan.batch;
  const int32_t first = seq.num_computed_tokens;
  const int32_t end = first + num_new_tokens;
  const bool is_prefill = !(num_new_tokens == 1 && end == seq.num_tokens() && first >= seq.num_prompt_tokens);
  const int32_t block = batch.block_size;
  std::vector<int32_t> table;
  kv_.block_table(seq.seq_id, table);
  // Text positions rotate; cache positions address the K/V (equal unless streaming shifted it).
  const int32_t cache_end = end - seq.num_evicted_tokens;
  if (static_cast<int64_t>(table.size()) * block < cache_end)
    throw Error(ErrorCode::plugin, "KV allocator: the block table of " + describe(seq) + " covers " +
                                       std::to_string(table.size() * static_cast<size_t>(block)) +
                                       " tokens, the step needs " + std::to_string(cache_end));
  for (int32_t p = first; p < end; ++p) {
    if (seq.pending_row >= 0 && p == seq.num_tokens() - 1)  // pending: the step in flight samples it
      batch.fed_back.push_back({batch.num_tokens(), seq.pending_row});
    batch.token_ids.push_back(seq.tokens[static_cast<size_t>(p)]);
    batch.positions.push_back(p);
    const int32_t c = cache_position(seq, p);
    batch.slot_mapping.push_back(table[static_cast<size_t>(c / block)] + c % block);
  }
  batch.query_start.push_back(batch.num_tokens());
  batch.context_lens.push_back(cache_end);
  step_tables_.push_back(std::move(table));

  ScheduledSeq s;
  s.seq_id = seq.seq_id;
  s.num_new_tokens = num_new_tokens;
  s.first_new_position = first;
  s.is_prefill = is_prefill;
  // Reaching the last token produces the next one: n rows when it forks.
  s.num_samples = end == seq.num_tokens() ? seq.num_unforked_samples : 0;
  for (int32_t k = 0; k < s.num_samples; ++k) {
    const int32_t index = s.num_samples > 1 ? k : seq.index;
    batch.logits_rows.push_back(batch.num_tokens() - 1);
    plan.logits.push_back({seq.seq_id, seq.request_id, index, seq.sampling, seq.request_key,
                           is_beam(seq) ? logits_row_history(seq, index) : seq.num_generated_tokens()});
  }
  plan.seqs.push_back(s);
  seq.last_step_id = plan.step_id;
  seq.in_flight = max_steps_in_flight_ > 1;
  if (is_prefill) stats_.num_prefill_tokens += static_cast<uint64_t>(num_new_tokens);
}

// Static policy: one row per finished member of the batch, at its last
// position over its held KV. The row writes no KV (slot -1) and makes no
// logits: it costs what the padded slot of a fixed batch costs.
void Scheduler::add_static_padding(StepPlan& plan, int32_t& budget) {
  StepBatch& batch = plan.batch;
  for (const StaticPad& pad : static_pads_) {
    if (budget == 0 || static_cast<int32_t>(plan.seqs.size()) >= max_num_seqs_) return;
    std::vector<int32_t> table;
    kv_.block_table(pad.seq_id, table);
    batch.token_ids.push_back(pad.token);
    batch.positions.push_back(pad.position);
    batch.slot_mapping.push_back(-1);
    batch.query_start.push_back(batch.num_tokens());
    batch.context_lens.push_back(pad.position + 1);
    step_tables_.push_back(std::move(table));
    ScheduledSeq s;
    s.seq_id = pad.seq_id;
    s.num_new_tokens = 1;
    s.first_new_position = pad.position;
    s.is_padding = true;
    plan.seqs.push_back(s);
    budget -= 1;
  }
}

void Scheduler::release_static_padding() {
  for (const StaticPad& pad : static_pads_) kv_.free_seq(pad.seq_id);
  static_pads_.clear();
}

// Block tables as one [num_seqs, max_blocks_per_seq] array, short rows padded
// with 0 (never read: context_lens bounds every access).
void Scheduler::finalize_batch(StepPlan& plan) {
  size_t width = 0;
  for (const auto& t : step_tables_) width = std::max(width, t.size());
  set_tree_parents(plan);
  plan.batch.max_blocks_per_seq = static_cast<int32_t>(width);
  plan.batch.block_tables.assign(step_tables_.size() * width, 0);
  for (size_t s = 0; s < step_tables_.size(); ++s)
    std::copy(step_tables_[s].begin(), step_tables_[s].end(), plan.batch.block_tables.begin() + s * width);
  step_tables_.clear();
}

void Scheduler::insert_running(Sequence* seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, older), seq);
}

void Scheduler::remove_running(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
}

}  // namespace llmk
