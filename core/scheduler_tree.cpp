// Scheduler, token trees: a speculating decode's draft tree in the
// flattened step, and its verification (core/speculation.hpp, DraftTree).
//
// The rows of a tree follow its decode row in tree order. Node j's K/V goes
// to the next cache slot in row order (position newest + 1 + j of the
// sequence's cache), while its text position, which RoPE rotates by, is the
// newest token's plus its depth; the attention plugin masks each row to the
// cached context, its ancestors and itself (StepBatch::tree_parents). After
// verification the accepted path's K/V is moved to the positions right after
// the newest token, by KV copies the next step applies before its forward,
// and the rest is rolled back with truncate_seq.
#include <algorithm>

#include "core/scheduler.hpp"
#include "core/speculation.hpp"

namespace llmk {

void Scheduler::add_tree_rows(StepPlan& plan, Sequence& seq, const DraftTree& tree) {
  StepBatch& batch = plan.batch;
  const std::vector<int32_t>& table = step_tables_.back();
  const int32_t block = batch.block_size;
  const int32_t n = tree.size();
  std::vector<int32_t> depths;
  tree.depths(depths);
  // Tree rows draw as plain rows; the path follows their ids.
  plan.logits.back().draft_token = -1;
  const auto decode_logit = static_cast<int32_t>(plan.logits.size()) - 1;
  const LogitsTarget decode_target = plan.logits.back();
  const int32_t newest = seq.num_tokens() - 1;
  for (int32_t j = 0; j < n; ++j) {
    const int32_t c = seq.num_tokens() + j;  // its cache position
    const auto at = static_cast<size_t>(j);
    batch.token_ids.push_back(tree.tokens[at]);
    batch.positions.push_back(newest + depths[at]);
    batch.slot_mapping.push_back(table.at(static_cast<size_t>(c / block)) + c % block);
    batch.logits_rows.push_back(batch.num_tokens() - 1);
    LogitsTarget target = decode_target;
    target.num_generated = seq.num_generated_tokens() + depths[at];
    target.tree_parent = decode_logit + 1 + tree.parents[at];
    target.tree_token = tree.tokens[at];
    plan.logits.push_back(std::move(target));
  }
  batch.query_start.back() += n;
  batch.context_lens.back() += n;
  ScheduledSeq& s = plan.seqs.back();
  s.num_new_tokens += n;
  s.num_draft_tokens = n;
  s.draft_parents = tree.parents;
  seq.num_kv_tokens = seq.num_tokens() + n;
}

// StepBatch::tree_parents for a plan holding trees: a tree's rows as its
// nodes say (the decode row the root), every other sequence's causal.
void Scheduler::set_tree_parents(StepPlan& plan) {
  const bool any = std::any_of(plan.seqs.begin(), plan.seqs.end(),
                               [](const ScheduledSeq& s) { return !s.draft_parents.empty(); });
  if (!any) return;
  StepBatch& batch = plan.batch;
  batch.tree_parents.clear();
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    const int32_t num_rows = batch.query_start[i + 1] - batch.query_start[i];
    if (s.draft_parents.empty()) {
      for (int32_t r = 0; r < num_rows; ++r) batch.tree_parents.push_back(r - 1);
      continue;
    }
    batch.tree_parents.push_back(-1);
    for (int32_t p : s.draft_parents) batch.tree_parents.push_back(p + 1);
  }
}

// Row first_row is the newest token's, first_row + 1 + j node j's. The path
// from the newest token follows the rows' ids (accepted_path); its nodes'
// K/V moves next to the newest token's, the rest is rolled back, and the
// ids along the path are emitted in order until one ends the sequence.
void Scheduler::apply_verified_tree(const StepPlan& plan, const ScheduledSeq& s, size_t first_row, Sequence& seq,
                                   const int32_t* sampled, TimePoint t, std::vector<TokenEvent>& events) {
  const int32_t n = s.num_draft_tokens;
  const auto row0 = static_cast<size_t>(plan.batch.query_start[static_cast<size_t>(&s - plan.seqs.data())]);
  const int32_t* fed = plan.batch.token_ids.data() + row0;  // newest token, then the nodes
  DraftTree tree;
  tree.tokens.assign(fed + 1, fed + 1 + n);
  tree.parents = s.draft_parents;
  const std::vector<int32_t> path = accepted_path(tree, {sampled, static_cast<size_t>(n + 1)});
  const auto a = static_cast<int32_t>(path.size());
  stats_.num_spec_drafts += 1;
  stats_.num_spec_draft_tokens += static_cast<uint64_t>(n);
  stats_.num_spec_accepted_tokens += static_cast<uint64_t>(a);
  // The heads read the row of the last accepted node (the newest token's where none was).
  observe_hidden(seq, first_row + (a == 0 ? 0 : 1 + static_cast<size_t>(path.back())), seq.num_tokens() - 1 + a);

  // Node path[d] sits at cache position base + 1 + path[d] >= base + 1 + d,
  // and path[d] grows with d: copied in order, no copy overwrites a source
  // still to be read. The next plan applies them first.
  const int32_t base = s.first_new_position;
  const auto block = static_cast<int32_t>(kv_.block_size());
  std::vector<int32_t> table;
  kv_.block_table(seq.seq_id, table);
  auto slot = [&](int32_t p) { return table.at(static_cast<size_t>(p / block)) + p % block; };
  std::vector<int32_t> tokens{fed[0]};
  for (int32_t d = 0; d < a; ++d) {
    const int32_t node = path[static_cast<size_t>(d)];
    tokens.push_back(tree.tokens[static_cast<size_t>(node)]);
    if (node != d) carried_copies_.push_back(llmk_kv_copy{slot(base + 1 + node), slot(base + 1 + d), 1});
  }
  if (a > 0 && path.back() != a - 1) kv_moved_seqs_.push_back(seq.seq_id);
  const int32_t verified = base + 1 + a;  // positions holding valid K/V once the copies ran
  kv_.commit_tokens(seq.seq_id, static_cast<uint32_t>(base), tokens.data(), static_cast<uint32_t>(1 + a));
  if (verified < seq.num_kv_tokens) kv_.truncate_seq(seq.seq_id, static_cast<uint32_t>(verified));
  seq.num_kv_tokens = verified;
  seq.num_computed_tokens = verified;
  const uint64_t seq_id = seq.seq_id;
  for (int32_t d = 0; d <= a; ++d) {
    const int32_t row = d == 0 ? 0 : 1 + path[static_cast<size_t>(d - 1)];
    const size_t first_event = events.size();
    apply_token(seq, sampled[row], t, events);  // may finish (and destroy) seq
    for (size_t i = first_event; i < events.size(); ++i)
      if (events[i].token_id) events[i].logits_row = static_cast<int32_t>(first_row) + row;
    if (find(seq_id) == nullptr) break;
  }
}

}  // namespace llmk
