// Scheduler, the speculative half: which decodes draft, their rows in the
// flattened step, and what a verification step's sampled ids mean.
#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/medusa_proposer.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"
#include "core/speculation.hpp"

namespace llmk {

void Scheduler::init_speculation(const SpeculativeSection& config, std::shared_ptr<Proposer> proposer,
                                 bool token_trees) {
  proposer_ = proposer ? std::move(proposer)
                      : std::shared_ptr<Proposer>(make_proposer(
                            config, nullptr, static_cast<uint32_t>(std::max<int32_t>(limits_.vocab_size, 0))));
  if (!proposer_ && config.method == "draft")
    throw Error(ErrorCode::invalid_config, "speculative.method: 'draft' needs the draft model's proposer "
                                           "(build_engine_parts makes it from speculative.draft_model)");
  if (!proposer_ && config.method == "medusa")
    throw Error(ErrorCode::invalid_config, "speculative.method: 'medusa' needs the heads' proposer "
                                           "(build_engine_parts makes it from speculative.medusa_heads)");
  if (!proposer_) return;
  const std::string method = "speculative.method: '" + config.method + "'";
  if (is_static_)
    throw Error(ErrorCode::invalid_config, method + " needs scheduler.policy continuous (it is static)");
  if (max_steps_in_flight_ > 1)
    throw Error(ErrorCode::invalid_config, method + " does not run with " + std::to_string(max_steps_in_flight_) +
                                               " pipelined steps in flight (set parallel.steps_in_flight to 1)");
  if (!kv_.can_truncate())
    throw Error(ErrorCode::invalid_config, method + " needs a KV allocator that rolls back rejected tokens "
                                                    "(truncate_seq, KV allocator API 2.3); plugins.kv_allocator's "
                                                    "cannot");
  num_speculative_tokens_ = static_cast<int32_t>(config.num_tokens);
  spec_max_batch_size_ = config.max_batch_size;
  spec_sampled_drafts_ = config.draft_sampling == "sampled";
  // Trees need an attention plugin that reads them; without one, chains.
  if (config.tree_width > 1 && token_trees)
    spec_tree_nodes_ = static_cast<int32_t>(config.tree_nodes != 0 ? config.tree_nodes
                                                                   : config.num_tokens * config.tree_width);
  // Medusa heads: a tree of the heads' candidates, or their top-1 chain.
  medusa_ = dynamic_cast<MedusaProposer*>(proposer_.get());
  if (medusa_ && token_trees) {
    const uint32_t nodes = config.tree_nodes != 0 ? config.tree_nodes
                           : medusa_->num_choices() > 0 ? static_cast<uint32_t>(medusa_->num_choices())
                                                        : config.num_tokens * config.medusa_top_k;
    spec_tree_nodes_ = std::min(static_cast<int32_t>(nodes), sampling_limits::max_speculative_tokens);
  }
}

void Scheduler::observe_hidden(const Sequence& seq, size_t row, int32_t position) {
  if (medusa_ == nullptr || step_hidden_.empty() || !may_speculate(seq)) return;
  const size_t h = step_hidden_size_;
  medusa_->observe(seq.seq_id, position, step_hidden_.subspan(row * h, h));
}

// A tree's rows draw each from its own row; penalties would read the drafts
// before a row as its history, which in a tree are not its ancestors: such
// requests verify chains.
bool Scheduler::may_draft_tree(const Sequence& seq) const {
  const SamplingParams& p = *seq.sampling;
  // A structured request drafts chains: its grammar walks one path of drafts.
  return spec_tree_nodes_ > 0 && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && p.structured == nullptr;
}

int32_t Scheduler::num_pending_decodes() const {
  return static_cast<int32_t>(std::count_if(running_.begin(), running_.end(), [](const Sequence* s) {
    return s->num_kv_tokens < s->num_tokens() && !s->in_flight;
  }));
}

// One sample (after a fork each sample may). A greedy row's id is its
// argmax and a sampled row's follows the rejection rule (SamplerRow::
// draft_token, or draft_probs for a draft drawn from q, whose residual is
// 0 at a draft it can reject): either way a draft is accepted exactly when
// its row's id equals it, and the ids are distributed as plain decoding's.
bool Scheduler::may_speculate(const Sequence& seq) const {
  return proposer_ && seq.num_unforked_samples == 1 && seq.sampling != nullptr && !is_beam(seq) &&
         seq.sampling->num_speculative_tokens != 0;  // 0: the request turned drafts off
}

// Planning ahead, a decode's newest token is not known, so it cannot draft:
// a step with such a sequence is not followed by a plan made ahead.
bool Scheduler::any_may_speculate(const StepPlan& plan) {
  return std::any_of(plan.seqs.begin(), plan.seqs.end(), [this](const ScheduledSeq& s) {
    const Sequence* seq = find(s.seq_id);
    return seq != nullptr && seq->status == SequenceStatus::running && may_speculate(*seq);
  });
}

// The drafts of every decode that may speculate in the step being planned,
// asked of the proposer at once (a draft model batches them): never planning
// ahead, never past the tokens a sequence may still generate (the step
// emits at most drafts + 1), at most max_drafts each, and none at all when
// the step has more decodes than speculative.max_batch_size (where
// verification rows cost more than the steps they save).
void Scheduler::draft_for_step(int32_t max_drafts) {
  step_drafts_.clear();
  step_draft_probs_.clear();
  if (planning_ahead_ || max_drafts <= 0) return;
  std::vector<DraftRequest> requests;
  if (!speculation_pays(spec_max_batch_size_, num_pending_decodes())) return;
  for (const Sequence* seq : running_) {
    if (seq->num_kv_tokens >= seq->num_tokens() || seq->in_flight) continue;  // no decode this step
    if (seq->pending_row >= 0 || !may_speculate(*seq)) continue;
    const int32_t room = seq->max_total_tokens() - seq->num_tokens() - 1;
    const int32_t wanted = seq->sampling->num_speculative_tokens;  // -1: the engine's
    const int32_t k = std::min({wanted >= 0 ? std::min(wanted, num_speculative_tokens_) : num_speculative_tokens_,
                                max_drafts, room});
    if (k <= 0) continue;
    // A tree's nodes all take KV slots: at most the room the sequence has.
    const int32_t nodes = may_draft_tree(*seq) ? std::min({spec_tree_nodes_, max_drafts, room}) : 0;
    DraftRequest& r = requests.emplace_back(
        DraftRequest{seq->seq_id, seq->tokens, k, seq->max_total_tokens(), nodes > k ? nodes : 0});
    if (spec_sampled_drafts_ && seq->sampling->temperature >= kGreedyTemperature) {
      r.sampling = seq->sampling.get();
      r.seed = seq->sampling->seed.value_or(0);
      r.sample_index = static_cast<uint32_t>(seq->index);
      r.num_prompt_tokens = seq->num_prompt_tokens;
    }
  }
  if (requests.empty()) return;
  if (spec_tree_nodes_ > 0) {  // prompt lookup's trees: proposed with certainty
    std::vector<DraftTree> out;
    proposer_->propose_trees(requests, out);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (out[i].empty()) continue;
      if (requests[i].max_nodes == 0 && !out[i].is_chain()) continue;  // asked for a chain only
      step_drafts_[requests[i].seq_id] = std::move(out[i]);
    }
    return;
  }
  std::vector<std::vector<int32_t>> out;
  std::vector<std::vector<DraftProbs>> probs;
  proposer_->propose(requests, out, probs);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (out[i].empty()) continue;
    step_drafts_[requests[i].seq_id] = DraftTree::chain(out[i]);
    if (!probs[i].empty()) step_draft_probs_[requests[i].seq_id] = std::move(probs[i]);
  }
}

// This step's drafts for seq, at most max_drafts of them (the budget the
// decodes planned before it left).
void Scheduler::propose_drafts(const Sequence& seq, int32_t max_drafts, DraftTree& drafts) {
  const auto it = step_drafts_.find(seq.seq_id);
  if (it == step_drafts_.end() || max_drafts <= 0) return;
  drafts = it->second;
  drafts.keep(max_drafts);
}

// The drafts follow the sequence's decode row, which add_to_batch has just
// appended: its rows, context and logits grow by one per draft.
void Scheduler::add_draft_rows(StepPlan& plan, Sequence& seq, const DraftTree& tree) {
  if (!tree.is_chain()) {
    add_tree_rows(plan, seq, tree);
    return;
  }
  const std::vector<int32_t>& drafts = tree.tokens;
  StepBatch& batch = plan.batch;
  const std::vector<int32_t>& table = step_tables_.back();
  const int32_t block = batch.block_size;
  const auto k = static_cast<int32_t>(drafts.size());
  const auto probs = step_draft_probs_.find(seq.seq_id);
  auto probs_of = [&](int32_t i) {  // row i verifies draft i with its q, if drawn
    return probs == step_draft_probs_.end() ? DraftProbs{} : probs->second.at(static_cast<size_t>(i));
  };
  plan.logits.back().draft_token = drafts[0];
  plan.logits.back().draft_probs = probs_of(0);
  const LogitsTarget decode_target = plan.logits.back();
  for (int32_t i = 0; i < k; ++i) {
    const int32_t p = seq.num_tokens() + i;
    batch.token_ids.push_back(drafts[static_cast<size_t>(i)]);
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
    batch.logits_rows.push_back(batch.num_tokens() - 1);
    LogitsTarget target = decode_target;
    target.num_generated = seq.num_generated_tokens() + 1 + i;
    target.draft_token = i + 1 < k ? drafts[static_cast<size_t>(i + 1)] : -1;
    target.draft_probs = i + 1 < k ? probs_of(i + 1) : DraftProbs{};
    plan.logits.push_back(std::move(target));
  }
  batch.query_start.back() += k;
  batch.context_lens.back() += k;
  ScheduledSeq& s = plan.seqs.back();
  s.num_new_tokens += k;
  s.num_draft_tokens = k;
  seq.num_kv_tokens = seq.num_tokens() + k;
}

// Rows first_row .. first_row + k: the sampled id after the newest token,
// then after each draft. The accepted drafts and the next id are emitted in
// order until one ends the sequence; the K/V of the newest token and the
// accepted drafts is committed, that of the rejected drafts rolled back.
void Scheduler::apply_verified(const StepPlan& plan, const ScheduledSeq& s, size_t first_row, Sequence& seq,
                               const int32_t* sampled, TimePoint t, std::vector<TokenEvent>& events) {
  if (!s.draft_parents.empty()) {
    apply_verified_tree(plan, s, first_row, seq, sampled, t, events);
    return;
  }
  const int32_t k = s.num_draft_tokens;
  const auto row0 = static_cast<size_t>(plan.batch.query_start[static_cast<size_t>(&s - plan.seqs.data())]);
  const int32_t* fed = plan.batch.token_ids.data() + row0;  // newest token, then the drafts
  const int32_t a = num_accepted_greedy({fed + 1, static_cast<size_t>(k)}, {sampled, static_cast<size_t>(k + 1)});
  stats_.num_spec_drafts += 1;
  stats_.num_spec_draft_tokens += static_cast<uint64_t>(k);
  stats_.num_spec_accepted_tokens += static_cast<uint64_t>(a);

  // The heads read the row of the last accepted draft (the newest token's where none was).
  observe_hidden(seq, first_row + static_cast<size_t>(a), seq.num_tokens() - 1 + a);
  const int32_t verified = s.first_new_position + 1 + a;  // positions holding valid K/V
  kv_.commit_tokens(seq.seq_id, static_cast<uint32_t>(s.first_new_position), fed, static_cast<uint32_t>(1 + a));
  if (verified < seq.num_kv_tokens) kv_.truncate_seq(seq.seq_id, static_cast<uint32_t>(verified));
  seq.num_kv_tokens = verified;
  seq.num_computed_tokens = verified;
  const uint64_t seq_id = seq.seq_id;
  for (int32_t j = 0; j <= a; ++j) {
    const size_t first_event = events.size();
    apply_token(seq, sampled[j], t, events);  // may finish (and destroy) seq
    for (size_t i = first_event; i < events.size(); ++i)
      if (events[i].token_id) events[i].logits_row = static_cast<int32_t>(first_row) + j;
    if (find(seq_id) == nullptr) break;
  }
}

}  // namespace llmk
