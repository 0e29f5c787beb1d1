// A draft model as a Proposer (speculative.method draft): a second, cheaper
// model (any model llmk loads, e.g. a quantized copy of the target through
// speculative.draft_linear, or a smaller model of the family) drafts k
// tokens by k steps, all speculating sequences in one batch per step: its
// greedy choices, or (a request with DraftRequest::sampling) draws from its
// own processed distribution q under the request's sampling parameters,
// each returned with its q (tokens with q > 0) for the rejection rule.
//
// Where its steps run: on the scheduler's thread, inside the planning of the
// target's step, on an executor of its own (its weights, its KV memory, its
// KV allocator instance). A sequence drafts only in a plan made after its
// previous step's update (no plan is made ahead for it), so the target's
// executor is idle while the draft computes; the drafts are inputs of the
// plan, so nothing could overlap them, and a message round trip to another
// actor per draft step would only add latency.
//
// Its cache follows the target's sequence by token, not by event: each call
// keeps the longest common prefix of what the draft holds K/V for and the
// sequence's tokens, rolls the rest back (truncate_seq: the rejected drafts,
// or everything after a recompute preemption), computes the tokens it lacks
// as a prefill chunk, then decodes. The draft keeps K/V for the tokens it
// fed, i.e. the sequence and its first k - 1 drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/executor.hpp"
#include "core/kv_allocator.hpp"
#include "core/plugin_loader.hpp"
#include "core/sampler.hpp"
#include "core/speculation.hpp"

namespace llmk {

class DraftModelProposer final : public Proposer {
 public:
  // The checkpoint must be the executor's and outlive nothing it holds:
  // the proposer keeps it alive.
  DraftModelProposer(std::shared_ptr<const Checkpoint> checkpoint, std::unique_ptr<Executor> executor,
                     std::unique_ptr<KvAllocator> kv);
  ~DraftModelProposer() override;

  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out,
               std::vector<std::vector<DraftProbs>>& probs) override;
  void release(uint64_t seq_id) override;

  // Draft forwards run and sequences whose cache was dropped for room.
  uint64_t num_steps() const { return num_steps_; }
  uint64_t num_evictions() const { return num_evictions_; }
  const KvAllocator& kv() const { return *kv_; }

 private:
  struct Work;
  bool make_room(uint64_t seq_id, const DraftRequest& r, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies,
                 std::span<const DraftRequest> requests);
  void drop(uint64_t seq_id);
  int32_t draw(const DraftRequest& r, const float* logits, int32_t vocab_size, const std::vector<int32_t>& drafts,
               std::vector<DraftProbs>& probs);

  std::shared_ptr<const Checkpoint> checkpoint_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<KvAllocator> kv_;
  std::unique_ptr<Sampler> sampler_;  // over the draft's logits, made when first drawn from
  std::vector<int32_t> history_;  // scratch: a draw's generated ids
  std::vector<float> logits_;     // scratch: a drawn row's logits on the host [vocab_size]
  std::unordered_map<uint64_t, std::vector<int32_t>> cached_;  // per sequence: the tokens its K/V holds
  uint64_t num_steps_ = 0, num_evictions_ = 0;
};

// Opens speculative.draft_model, checks it shares the target's tokenizer
// (the vocabulary size and every token's string, else Error(invalid_config)
// naming speculative.draft_model and the first difference), and builds its
// executor (the target's executor settings, speculative.draft_linear as its
// linear plugin) with a KV cache of num_kv_slots slots under the target's
// allocator plugin, prefix caching off. Throws what opening the model or
// building the executor throws, with the key named.
std::unique_ptr<DraftModelProposer> make_draft_proposer(const EngineConfig& config, const Checkpoint& target,
                                                        uint32_t num_kv_slots, PluginRegistry& plugins);

}  // namespace llmk
