// Scheduler, beam search (SamplingParams::beam_width; docs/beam_search.md).
//
// A request of width W starts as one sequence, its prompt, that stands for
// W samples: its last prefill row is W logits rows (one per sampler slot,
// as a fork of n samples has), each listing the best 2W tokens by the
// model's raw log-probability. From the first update on, the search holds
// W beams, each a sequence of the allocator forked from another (shared
// K/V, copy-on-write where the allocator has it), all decoding in the same
// step. An update:
//   1. candidates: for each beam b and each of its 2W listed tokens t,
//      cumulative(b) + logprob(t | b); the best 2W of them, by that sum
//      (equal sums: the lower beam, then the higher-ranked token);
//   2. walked best first, rank r: a candidate whose token ends a hypothesis
//      (EOS or a stop id, unless ignore_eos) becomes a finished hypothesis
//      when r < W (else it is dropped); any other becomes a next beam, until
//      W of them;
//   3. a next beam that reaches max_tokens (or the context) becomes a
//      finished hypothesis too, and the search ends;
//   4. else the search ends when beam_search_done says so.
// A hypothesis of g generated tokens (its EOS counted) scores
// cumulative / g^length_penalty; the best W are kept. When the search ends,
// the best n (by score, best first) are the request's samples 0..n-1.
//
// The beams' sequences: a beam no next beam continues is freed first (so
// its slots serve the forks), one continued k times keeps its sequence for
// the first and forks k - 1 children, then every next beam appends its token.
// Each beam takes a sampler slot (Sequence::index, 0..W-1): the W rows of a
// step always use every slot once, and a row tells the sampler how many
// rows its slot has had (BeamGroup::slot_rows), which is all the sampler
// checks of a slot's history (beam rows read no penalty and draw nothing).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"

namespace llmk {

void Scheduler::add_beam_request(const std::string& request_id, Sequence& root, const SamplingParams& sampling,
                                 const SequenceHandoff& handoff) {
  auto refuse = [&request_id](const std::string& why) {
    throw Error(ErrorCode::invalid_argument, "request '" + request_id + "': " + why);
  };
  if (is_static_) refuse("beam search needs scheduler.policy continuous");
  if (max_steps_in_flight_ > 1) refuse("beam search does not run on a pipelined executor");
  if (streaming()) refuse("beam search does not run with a streaming window (kv_cache.window)");
  if (!handoff.export_key.empty() || handoff.import) refuse("beam search does not run with a KV handoff");
  const int32_t width = sampling.beam_width;
  // The rows' parameters: the raw log-probabilities of the best 2W tokens.
  auto params = std::make_shared<SamplingParams>(*root.sampling);
  params->n = width;
  params->temperature = 0.0f;
  params->logprobs = 2 * width;
  root.sampling = std::move(params);
  root.num_unforked_samples = width;
  BeamGroup group;
  group.width = width;
  group.num_outputs = sampling.n;
  group.length_penalty = sampling.length_penalty;
  group.early_stopping = sampling.early_stopping;
  group.stop = root.stop;
  group.beams = {root.seq_id};
  group.cumulative = {0.0};
  group.slot_rows.assign(static_cast<size_t>(width), 0);
  beam_groups_[request_id] = std::move(group);
}

int32_t Scheduler::logits_row_history(const Sequence& seq, int32_t sample_index) const {
  const BeamGroup& group = beam_groups_.at(seq.request_id);
  return group.slot_rows.at(static_cast<size_t>(sample_index));
}

// Phase 1 for a beam search: every beam grows by one slot, or none is
// planned. When the allocator is full, the youngest other sequences are
// preempted; when the search is itself the youngest, it restarts (or, with
// nothing else running, ends with an error).
Scheduler::BeamDecode Scheduler::schedule_beam_decodes(StepPlan& plan, int32_t& budget, bool& preempted,
                                                       bool may_preempt, Sequence& first) {
  const std::string request_id = first.request_id;
  const BeamGroup& group = beam_groups_.at(request_id);
  std::vector<Sequence*> beams;
  for (uint64_t id : group.beams) beams.push_back(find(id));
  for (Sequence* beam : beams) {
    std::vector<llmk_kv_copy> copies;
    while (!kv_.extend(beam->seq_id, static_cast<uint32_t>(beam->num_tokens()), copies)) {
      copies.clear();
      if (!may_preempt) return BeamDecode::wait;
      Sequence* victim = running_.back();
      if (victim->request_id != request_id) {
        preempt(*victim);
        preempted = true;
        continue;
      }
      if (running_.size() == beams.size()) {
        finish(*beam, FinishReason::error, std::nullopt,
               "request '" + request_id + "': a beam search of width " + std::to_string(group.width) + " over " +
                   std::to_string(beam->num_tokens()) +
                   " tokens does not fit in the KV cache even with nothing else running",
               plan.events);
      } else {
        restart_beam_group(request_id);
        preempted = true;
      }
      return BeamDecode::stop;
    }
    // Copies made for beams of a search that then restarts stay in the
    // plan: their slots are free, and nothing takes them in this step.
    beam->num_kv_tokens = beam->num_tokens();
    plan.batch.kv_copies.insert(plan.batch.kv_copies.end(), copies.begin(), copies.end());
  }
  for (Sequence* beam : beams) {
    add_to_batch(plan, *beam, 1);
    budget -= 1;
  }
  return BeamDecode::planned;
}

// Collects each search's rows and steps the searches whose every beam has one.
void Scheduler::update_beams(const std::vector<BeamRow>& rows, const std::vector<SampledToken>* details, TimePoint t,
                             std::vector<TokenEvent>& events) {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const BeamRow*>> by_request;
  for (const BeamRow& row : rows) {
    const Sequence* seq = find(row.seq_id);
    if (seq == nullptr) continue;
    auto [it, inserted] = by_request.try_emplace(seq->request_id);
    if (inserted) order.push_back(seq->request_id);
    it->second.push_back(&row);
    // The sampler took a row for each of its slots: all W for the prompt's rows.
    BeamGroup& group = beam_groups_.at(seq->request_id);
    if (seq->num_unforked_samples > 1) {
      for (int32_t& n : group.slot_rows) n += 1;
    } else {
      group.slot_rows.at(static_cast<size_t>(seq->index)) += 1;
    }
  }
  for (const std::string& request_id : order) {
    auto it = beam_groups_.find(request_id);
    if (it == beam_groups_.end()) continue;
    BeamGroup& group = it->second;
    const std::vector<const BeamRow*>& got = by_request[request_id];
    if (details == nullptr) {
      end_beam_group(request_id, FinishReason::error,
                     "internal error: beam search needs the sampler's log-probabilities of every row", events);
      continue;
    }
    // One row per live beam, in the group's beam order.
    std::vector<const BeamRow*> beam_rows;
    for (uint64_t id : group.beams) {
      auto r = std::find_if(got.begin(), got.end(), [id](const BeamRow* b) { return b->seq_id == id; });
      if (r == got.end()) break;
      beam_rows.push_back(*r);
    }
    if (beam_rows.size() != group.beams.size()) {
      end_beam_group(request_id, FinishReason::error,
                     "internal error: a step computed only some of a beam search's beams", events);
      continue;
    }
    step_beam_group(group, request_id, beam_rows, *details, t, events);
  }
}

namespace {

struct Candidate {
  double cumulative;
  int32_t beam;
  int32_t token;
};

}  // namespace

void Scheduler::step_beam_group(BeamGroup& group, const std::string& request_id,
                                const std::vector<const BeamRow*>& rows, const std::vector<SampledToken>& details,
                                TimePoint t, std::vector<TokenEvent>& events) {
  const auto width = static_cast<size_t>(group.width);
  std::vector<Sequence*> beams;
  for (uint64_t id : group.beams) beams.push_back(find(id));
  // 1. The best 2W candidates: each beam's listed tokens come best first,
  // so a stable sort keeps (beam, rank) order among equal sums.
  std::vector<Candidate> candidates;
  for (size_t b = 0; b < beams.size(); ++b) {
    const size_t row = rows[b]->first_row;
    if (row >= details.size() || !details[row].has_logprobs) {
      end_beam_group(request_id, FinishReason::error,
                     "internal error: a beam's row came without its log-probabilities", events);
      return;
    }
    const auto& top = details[row].logprobs.top;
    for (size_t r = 0; r < top.size() && r < 2 * width; ++r)
      candidates.push_back({group.cumulative[b] + static_cast<double>(top[r].second), static_cast<int32_t>(b),
                            top[r].first});
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cumulative > b.cumulative; });
  if (candidates.size() > 2 * width) candidates.resize(2 * width);

  // 2. Finished hypotheses and the next beams.
  const Sequence& any = *beams.front();
  const int32_t generated = any.num_generated_tokens() + 1;  // each beam's, with this step's token
  std::vector<Candidate> next;
  for (size_t r = 0; r < candidates.size() && next.size() < width; ++r) {
    const Candidate& c = candidates[r];
    if (any.is_stop_token(c.token)) {
      if (r < width)
        add_hypothesis(group, *beams[static_cast<size_t>(c.beam)], c.token, c.cumulative, FinishReason::stop, t);
      continue;
    }
    next.push_back(c);
  }
  stats_.num_generated_tokens += next.size();

  // 3 and 4: the end of the search.
  const bool at_length = any.reaches_length(generated, any.num_tokens() + 1);
  if (next.empty() || at_length ||
      (!candidates.empty() && beam_search_done(group, candidates.front().cumulative, generated))) {
    if (at_length)
      for (const Candidate& c : next)
        add_hypothesis(group, *beams[static_cast<size_t>(c.beam)], c.token, c.cumulative, FinishReason::length, t);
    end_beam_group(request_id, FinishReason::none, "", events);
    return;
  }

  // The sequences: free the beams nobody continues, keep each continued
  // beam's sequence for its first continuation, fork the others.
  std::vector<int32_t> children(beams.size(), 0);
  for (const Candidate& c : next) children[static_cast<size_t>(c.beam)] += 1;
  std::vector<int32_t> free_slots;
  for (size_t b = 0; b < beams.size(); ++b) {
    if (children[b] > 0) continue;
    free_slots.push_back(beams[b]->index);
    drop_beam(*beams[b]);
    beams[b] = nullptr;
  }
  // The prompt's sequence holds slot 0; its forks take 1..W-1.
  if (beams.size() == 1)
    for (int32_t k = static_cast<int32_t>(width) - 1; k >= 1; --k) free_slots.push_back(k);
  std::vector<Sequence*> next_seqs(next.size(), nullptr);
  std::vector<bool> kept(beams.size(), false);
  for (size_t j = 0; j < next.size(); ++j) {
    const auto b = static_cast<size_t>(next[j].beam);
    if (!kept[b]) {
      kept[b] = true;
      next_seqs[j] = beams[b];
    }
  }
  RequestState& state = requests_.at(request_id);
  for (size_t j = 0; j < next.size(); ++j) {
    if (next_seqs[j] != nullptr) continue;
    Sequence& parent = *beams[static_cast<size_t>(next[j].beam)];
    auto child = std::make_unique<Sequence>(parent);
    child->seq_id = next_seq_id_++;
    child->index = free_slots.back();
    child->num_unforked_samples = 1;
    if (!kv_.fork(parent.seq_id, child->seq_id)) {
      // No room for the child (an allocator that copies): the search
      // restarts once others have freed K/V, or fails alone.
      group.beams.clear();
      for (Sequence* s : next_seqs)
        if (s != nullptr) group.beams.push_back(s->seq_id);
      const bool alone = running_.size() == group.beams.size();
      if (alone) {
        end_beam_group(request_id, FinishReason::error,
                       "request '" + request_id + "': a beam search of width " + std::to_string(group.width) +
                           " does not fit in the KV cache even with nothing else running",
                       events);
      } else {
        restart_beam_group(request_id);
      }
      return;
    }
    free_slots.pop_back();
    next_seqs[j] = child.get();
    state.seq_ids.push_back(child->seq_id);
    insert_running(child.get());
    seqs_.emplace(child->seq_id, std::move(child));
  }
  group.beams.clear();
  group.cumulative.clear();
  for (size_t j = 0; j < next.size(); ++j) {
    Sequence& seq = *next_seqs[j];
    seq.num_unforked_samples = 1;
    seq.append_token(next[j].token, t);
    group.beams.push_back(seq.seq_id);
    group.cumulative.push_back(next[j].cumulative);
  }
}

// Hugging Face's BeamHypotheses.add: kept when fewer than W are kept or it
// beats the worst, which then goes.
void Scheduler::add_hypothesis(BeamGroup& group, const Sequence& beam, std::optional<int32_t> token,
                               double cumulative, FinishReason reason, TimePoint t) {
  Sequence copy = beam;
  copy.offloaded_blocks.clear();
  if (token) copy.append_token(*token, t);
  copy.finish_time = t;
  BeamHypothesis h;
  h.tokens.assign(copy.tokens.begin() + copy.num_prompt_tokens, copy.tokens.end());
  h.cumulative_logprob = cumulative;
  const double length = static_cast<double>(std::max<size_t>(1, h.tokens.size()));
  h.score = cumulative / std::pow(length, static_cast<double>(group.length_penalty));
  h.reason = reason;
  h.usage = copy.usage();
  h.timings = copy.timings();
  auto worst = std::min_element(group.finished.begin(), group.finished.end(),
                                [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; });
  if (group.finished.size() < static_cast<size_t>(group.width)) {
    group.finished.push_back(std::move(h));
  } else if (h.score > worst->score) {
    *worst = std::move(h);
  }
}

// Hugging Face's BeamHypotheses.is_done, `generated` counting this step's
// token: with W hypotheses, can the best candidate still beat the worst?
bool Scheduler::beam_search_done(const BeamGroup& group, double best_cumulative, int32_t generated) const {
  if (group.finished.size() < static_cast<size_t>(group.width)) return false;
  if (group.early_stopping == EarlyStopping::immediate) return true;
  double worst = group.finished.front().score;
  for (const BeamHypothesis& h : group.finished) worst = std::min(worst, h.score);
  const double lp = group.length_penalty;
  double length = generated;
  if (group.early_stopping == EarlyStopping::never && lp > 0) {
    // The longest a running beam may grow: its best score is at that length.
    const Sequence* beam = sequence(group.beams.front());
    length = beam != nullptr ? std::min(beam->stop.max_tokens, beam->stop.max_seq_len - beam->num_prompt_tokens)
                             : generated;
  }
  return worst >= best_cumulative / std::pow(length, lp);
}

// A beam leaves: its K/V is freed, nothing is emitted.
void Scheduler::drop_beam(Sequence& seq) {
  if (seq.status == SequenceStatus::running) {
    remove_running(&seq);
    kv_.free_seq(seq.seq_id);
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &seq), waiting_.end());
  }
  seqs_.erase(seq.seq_id);
}

// Every beam is freed and the prompt's sequence goes back to the head of
// the queue, to be prefilled and searched again (the same choices: the
// search is deterministic). The sampler slots keep their row counts.
void Scheduler::restart_beam_group(const std::string& request_id) {
  BeamGroup& group = beam_groups_.at(request_id);
  Sequence* root = nullptr;
  for (uint64_t id : group.beams) {
    Sequence* seq = find(id);
    if (seq == nullptr) continue;
    if (root == nullptr) {
      root = seq;
      continue;
    }
    drop_beam(*seq);
  }
  if (root->status == SequenceStatus::running) {
    remove_running(root);
    kv_.free_seq(root->seq_id);
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), root), waiting_.end());
  }
  root->tokens.resize(static_cast<size_t>(root->num_prompt_tokens));
  root->token_times.clear();
  root->first_token_time = {};
  root->index = 0;
  root->num_unforked_samples = group.width;
  root->num_kv_tokens = 0;
  root->num_computed_tokens = 0;
  root->num_evicted_tokens = 0;
  root->num_cache_rows = 0;
  root->status = SequenceStatus::preempted;
  waiting_.push_front(root);
  group.beams = {root->seq_id};
  group.cumulative = {0.0};
  group.finished.clear();
  stats_.num_preemptions += 1;
}

void Scheduler::end_beam_group(const std::string& request_id, FinishReason reason, const std::string& error,
                               std::vector<TokenEvent>& events) {
  BeamGroup group = std::move(beam_groups_.at(request_id));
  beam_groups_.erase(request_id);
  for (uint64_t id : group.beams)
    if (Sequence* seq = find(id)) drop_beam(*seq);
  const int32_t n = group.num_outputs;
  std::sort(group.finished.begin(), group.finished.end(),
            [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  for (int32_t k = 0; k < n; ++k) {
    const bool done = k == n - 1;
    if (reason != FinishReason::none || static_cast<size_t>(k) >= group.finished.size()) {
      TokenEvent e;
      e.request_id = request_id;
      e.index = k;
      e.finished = true;
      e.finish_reason = reason == FinishReason::none ? FinishReason::error : reason;
      e.error = reason == FinishReason::none ? "internal error: the beam search ended with too few hypotheses" : error;
      e.request_done = done;
      events.push_back(std::move(e));
      continue;
    }
    const BeamHypothesis& h = group.finished[static_cast<size_t>(k)];
    for (size_t i = 0; i + 1 < h.tokens.size(); ++i) {
      TokenEvent e;
      e.request_id = request_id;
      e.index = k;
      e.token_id = h.tokens[i];
      events.push_back(std::move(e));
    }
    TokenEvent e;
    e.request_id = request_id;
    e.index = k;
    if (!h.tokens.empty()) {
      e.token_id = h.tokens.back();
      e.is_stop_token = h.reason == FinishReason::stop;
    }
    e.finished = true;
    e.finish_reason = h.reason;
    e.usage = h.usage;
    e.timings = h.timings;
    e.beam = BeamScore{h.cumulative_logprob, h.score};
    e.request_done = done;
    events.push_back(std::move(e));
  }
  requests_.erase(request_id);
  stats_.num_requests_finished += 1;
}

}  // namespace llmk
