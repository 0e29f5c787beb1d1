#include "core/draft_proposer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/sampler.hpp"
#include "core/tokenizer.hpp"

namespace llmk {

// One sequence's part of a propose() call: the tokens still to feed (the
// ones the draft's cache lacks, then each new draft) from `position` on.
struct DraftModelProposer::Work {
  size_t index = 0;  // in requests and out
  uint64_t seq_id = 0;
  std::vector<int32_t> feed;
  int32_t position = 0;  // of feed[0]
  int32_t wanted = 0;    // drafts to produce
};

DraftModelProposer::DraftModelProposer(std::shared_ptr<const Checkpoint> checkpoint,
                                       std::unique_ptr<Executor> executor, std::unique_ptr<KvAllocator> kv)
    : checkpoint_(std::move(checkpoint)), executor_(std::move(executor)), kv_(std::move(kv)) {}

DraftModelProposer::~DraftModelProposer() {
  for (const auto& [seq_id, tokens] : cached_) kv_->free_seq(seq_id);
}

void DraftModelProposer::release(uint64_t seq_id) { drop(seq_id); }

void DraftModelProposer::drop(uint64_t seq_id) {
  if (cached_.erase(seq_id) != 0) kv_->free_seq(seq_id);
}

// Grows (or first reserves) the sequence's draft cache to num_tokens; when
// the cache is full, drops sequences that draft nothing this call, then
// gives up (false: the sequence goes without drafts, its cache dropped).
bool DraftModelProposer::make_room(uint64_t seq_id, const DraftRequest& r, uint32_t num_tokens,
                                   std::vector<llmk_kv_copy>& copies, std::span<const DraftRequest> requests) {
  auto grow = [&] {
    if (cached_.count(seq_id) != 0) return kv_->extend(seq_id, num_tokens, copies);
    llmk_kv_reserve_args args{};
    args.seq_id = seq_id;
    args.tokens = r.tokens.data();
    args.num_tokens = num_tokens;
    args.max_total_tokens = std::max<uint32_t>(num_tokens, static_cast<uint32_t>(r.max_total_tokens));
    uint32_t num_cached = 0;
    if (!kv_->reserve(args, &num_cached)) return false;
    cached_[seq_id];  // holds nothing yet (prefix caching is off)
    return true;
  };
  if (grow()) return true;
  std::vector<uint64_t> idle;
  for (const auto& entry : cached_) {
    const bool wanted = std::any_of(requests.begin(), requests.end(),
                                    [&](const DraftRequest& q) { return q.seq_id == entry.first; });
    if (!wanted) idle.push_back(entry.first);
  }
  for (uint64_t id : idle) {
    drop(id);
    num_evictions_ += 1;
  }
  if (!idle.empty() && grow()) return true;
  drop(seq_id);
  return false;
}

void DraftModelProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) {
  std::vector<std::vector<DraftProbs>> probs;
  propose(requests, out, probs);
}

void DraftModelProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out,
                                 std::vector<std::vector<DraftProbs>>& probs) {
  out.assign(requests.size(), {});
  probs.assign(requests.size(), {});
  const ModelRuntime& runtime = executor_->runtime();
  const auto max_seq_len = static_cast<int32_t>(runtime.max_seq_len);
  const auto block = static_cast<int32_t>(kv_->block_size());
  std::vector<Work> work;
  std::vector<llmk_kv_copy> copies;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    const auto len = static_cast<int32_t>(r.tokens.size());
    // Positions fed: up to len - 1 + wanted - 1, inside the draft's context.
    const int32_t wanted = std::min(r.max_tokens, max_seq_len - len + 1);
    if (wanted <= 0 || len == 0) continue;
    // Keep the common prefix of the cache and the tokens, but always feed
    // the newest token (its row gives the first draft); nothing kept: start
    // the sequence's cache afresh.
    int32_t common = 0;
    if (auto it = cached_.find(r.seq_id); it != cached_.end()) {
      std::vector<int32_t>& held = it->second;
      const auto same = std::mismatch(held.begin(), held.end(), r.tokens.begin(), r.tokens.end()).first - held.begin();
      common = static_cast<int32_t>(std::min<int64_t>(len - 1, same));
      if (common == 0) {
        drop(r.seq_id);
      } else if (common < static_cast<int32_t>(held.size())) {
        kv_->truncate_seq(r.seq_id, static_cast<uint32_t>(common));
        held.resize(static_cast<size_t>(common));
      }
    }
    if (!make_room(r.seq_id, r, static_cast<uint32_t>(len + wanted - 1), copies, requests)) continue;
    Work w;
    w.index = i;
    w.seq_id = r.seq_id;
    w.feed.assign(r.tokens.begin() + common, r.tokens.end());
    w.position = common;
    w.wanted = wanted;
    work.push_back(std::move(w));
  }

  // One forward per round: every sequence with tokens to feed gives a chunk
  // (up to the step's token limit); a chunk that ends its feed has logits,
  // whose greedy choice is the next draft and, unless it is the last, the
  // next token fed.
  const auto max_step = static_cast<int32_t>(runtime.max_step_tokens);
  std::vector<int32_t> table, choices;
  while (true) {
    StepBatch batch;
    batch.block_size = block;
    batch.query_start.push_back(0);
    batch.kv_copies = std::move(copies);
    copies.clear();
    std::vector<std::vector<int32_t>> tables;
    std::vector<Work*> with_logits;
    std::vector<std::pair<Work*, int32_t>> fed;
    int32_t budget = max_step;
    for (Work& w : work) {
      if (w.feed.empty() || budget == 0) continue;
      const int32_t chunk = std::min(static_cast<int32_t>(w.feed.size()), budget);
      table.clear();
      kv_->block_table(w.seq_id, table);
      for (int32_t j = 0; j < chunk; ++j) {
        const int32_t p = w.position + j;
        batch.token_ids.push_back(w.feed[static_cast<size_t>(j)]);
        batch.positions.push_back(p);
        batch.slot_mapping.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
      }
      batch.query_start.push_back(batch.num_tokens());
      batch.context_lens.push_back(w.position + chunk);
      if (chunk == static_cast<int32_t>(w.feed.size())) {
        batch.logits_rows.push_back(batch.num_tokens() - 1);
        with_logits.push_back(&w);
      }
      tables.push_back(table);
      fed.emplace_back(&w, chunk);
      budget -= chunk;
    }
    if (fed.empty()) break;
    size_t width = 0;
    for (const auto& t : tables) width = std::max(width, t.size());
    batch.max_blocks_per_seq = static_cast<int32_t>(width);
    batch.block_tables.assign(tables.size() * width, 0);
    for (size_t s = 0; s < tables.size(); ++s)
      std::copy(tables[s].begin(), tables[s].end(), batch.block_tables.begin() + static_cast<int64_t>(s * width));

    const LogitsView view = executor_->execute(batch);
    num_steps_ += 1;
    choices.assign(static_cast<size_t>(view.num_rows), 0);
    if (!executor_->argmax_rows(view, choices))
      for (int32_t r = 0; r < view.num_rows; ++r) choices[static_cast<size_t>(r)] = greedy_token(view.row(r), view.vocab_size);
    for (auto& [w, chunk] : fed) {
      std::vector<int32_t>& held = cached_.at(w->seq_id);
      held.insert(held.end(), w->feed.begin(), w->feed.begin() + chunk);
      w->feed.erase(w->feed.begin(), w->feed.begin() + chunk);
      w->position += chunk;
    }
    for (size_t r = 0; r < with_logits.size(); ++r) {
      Work& w = *with_logits[r];
      std::vector<int32_t>& drafts = out[w.index];
      const DraftRequest& q = requests[w.index];
      int32_t next = choices[r];
      if (q.sampling != nullptr) {
        logits_.resize(static_cast<size_t>(view.vocab_size));
        executor_->copy_logits_to_host(view, static_cast<int32_t>(r), 1, logits_.data());
        next = draw(q, logits_.data(), view.vocab_size, drafts, probs[w.index]);
      }
      drafts.push_back(next);
      if (static_cast<int32_t>(drafts.size()) < w.wanted) w.feed.push_back(next);
    }
  }
}

// A draft drawn from q, the draft's processed distribution after the
// sequence and the drafts before it (their history for the penalties), with
// the draft's own uniform stream at the generated index it would take.
int32_t DraftModelProposer::draw(const DraftRequest& r, const float* logits, int32_t vocab_size,
                                 const std::vector<int32_t>& drafts, std::vector<DraftProbs>& probs) {
  if (!sampler_) sampler_ = std::make_unique<Sampler>(vocab_size, 1);
  const auto num_prompt = static_cast<size_t>(r.num_prompt_tokens);
  history_.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(num_prompt), r.tokens.end());
  history_.insert(history_.end(), drafts.begin(), drafts.end());
  SamplerRow row;
  row.logits = logits;
  row.params = r.sampling;
  row.prompt_ids = r.tokens.first(num_prompt);
  row.generated_ids = history_;
  row.seed = r.seed;
  row.sample_index = r.sample_index;
  auto q = std::make_shared<std::vector<TokenProb>>();
  sampler_->distribution(row, *q);
  const int32_t id = draw_from(*q, draft_uniform(r.seed, r.sample_index, history_.size()));
  probs.push_back(std::move(q));
  return id;
}

namespace {

// The draft must map every id to the same token as the target, or its
// drafts would be another text's ids.
void check_same_tokenizer(const Checkpoint& target, const Checkpoint& draft, const std::string& draft_path) {
  const Tokenizer a(target.tokenizer_path()), b(draft.tokenizer_path());
  const std::string key = "speculative.draft_model: '" + draft_path + "'";
  if (a.vocab_size() != b.vocab_size() || target.config().vocab_size != draft.config().vocab_size)
    throw Error(ErrorCode::invalid_config,
                key + " has a vocabulary of " + std::to_string(b.vocab_size()) + " tokens (" +
                    std::to_string(draft.config().vocab_size) + " embedding rows); the target's has " +
                    std::to_string(a.vocab_size()) + " (" + std::to_string(target.config().vocab_size) +
                    "): the draft must share the target's tokenizer");
  for (int32_t id = 0; id < a.vocab_size(); ++id)
    if (a.id_to_piece(id) != b.id_to_piece(id))
      throw Error(ErrorCode::invalid_config, key + ": token " + std::to_string(id) + " is '" + b.id_to_piece(id) +
                                                 "' there and '" + a.id_to_piece(id) +
                                                 "' in the target's tokenizer: the draft must share it");
}

}  // namespace

std::unique_ptr<DraftModelProposer> make_draft_proposer(const EngineConfig& config, const Checkpoint& target,
                                                        uint32_t num_kv_slots, PluginRegistry& plugins) {
  const SpeculativeSection& s = config.speculative;
  EngineConfig draft = config;
  draft.model = ModelSection{};
  draft.model.path = s.draft_model;
  draft.speculative = SpeculativeSection{};
  if (!s.draft_linear.empty()) draft.plugins.linear = s.draft_linear;
  draft.kv_cache.capacity_tokens = num_kv_slots;
  draft.kv_cache.enable_prefix_caching = false;
  std::shared_ptr<const Checkpoint> checkpoint;
  try {
    checkpoint = open_model(draft.model);
  } catch (const Error& e) {
    throw Error(ErrorCode::invalid_config, "speculative.draft_model: '" + s.draft_model + "': " + e.what());
  }
  check_same_tokenizer(target, *checkpoint, s.draft_model);
  std::unique_ptr<Executor> executor = make_executor(draft, checkpoint, plugins);
  const ModelRuntime& runtime = executor->runtime();
  llmk_kv_allocator_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.num_slots = runtime.num_kv_slots;
  desc.block_size = draft.kv_cache.block_size;
  desc.max_seq_len = runtime.max_seq_len;
  desc.enable_prefix_caching = 0;
  desc.options = draft.plugins.kv_allocator_options.c_str();
  auto kv = std::make_unique<KvAllocatorImpl>(plugins.load(draft.plugins.kv_allocator, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  if (!kv->can_truncate())
    throw Error(ErrorCode::invalid_config, "speculative.method: 'draft' needs a KV allocator that rolls back "
                                           "(truncate_seq, KV allocator API 2.3); plugins.kv_allocator's cannot");
  spdlog::info("speculative: draft model {} ({} layers), executor {}, KV {} tokens", s.draft_model,
               checkpoint->config().num_layers, executor->describe(), runtime.num_kv_slots);
  return std::make_unique<DraftModelProposer>(std::move(checkpoint), std::move(executor), std::move(kv));
}

}  // namespace llmk
