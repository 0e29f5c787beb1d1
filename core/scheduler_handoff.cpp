// Prefill/decode disaggregation in the scheduler (core/kv_handoff.hpp): a
// prefill request saves its prompt's K/V when it ends; a handed-off request
// arrives as a sequence preempted in offload mode would, with its prompt's
// K/V on the host and its first token already generated.
#include <algorithm>

#include "core/error.hpp"
#include "core/scheduler.hpp"

namespace llmk {

namespace {

int32_t blocks_for(int32_t tokens, int32_t block) { return (tokens + block - 1) / block; }

}  // namespace

void Scheduler::check_handoff(const Sequence& seq, const SequenceHandoff& handoff) const {
  auto refuse = [&seq](const std::string& why) {
    throw Error(ErrorCode::invalid_argument, "request '" + seq.request_id + "': " + why);
  };
  if (kv_io_ == nullptr) refuse("this engine cannot save or restore K/V for a prefill/decode handoff");
  if (seq.num_unforked_samples != 1)
    refuse("a prefill/decode handoff carries one sample; n = " + std::to_string(seq.num_unforked_samples));
  if (!handoff.export_key.empty() && handoff.import) refuse("a request cannot both export and import K/V");
  if (!handoff.export_key.empty() && handoffs_ == nullptr)
    refuse("this engine keeps no prefill handoffs (disaggregation.mode is not prefill)");
  if (!handoff.import) return;
  const KvHandoff& h = *handoff.import;
  const int32_t block = static_cast<int32_t>(kv_.block_size());
  const auto num_prompt = static_cast<int32_t>(h.prompt_tokens.size());
  if (h.layout != kv_layout_)
    refuse("the handed-off K/V has layout '" + h.layout + "'; this engine's is '" + kv_layout_ + "'");
  if (h.block_size != block)
    refuse("the handed-off K/V comes in blocks of " + std::to_string(h.block_size) + " tokens; this engine's are " +
           std::to_string(block));
  if (h.prompt_tokens != seq.tokens) refuse("the handed-off K/V is of another prompt");
  if (static_cast<int32_t>(h.blocks.size()) != blocks_for(num_prompt, block))
    refuse("the handed-off K/V has " + std::to_string(h.blocks.size()) + " blocks for " + std::to_string(num_prompt) +
           " prompt tokens in blocks of " + std::to_string(block));
  if (h.first_token < 0 || (limits_.vocab_size > 0 && h.first_token >= limits_.vocab_size))
    refuse("the handed-off first token " + std::to_string(h.first_token) + " is outside the vocabulary");
}

void Scheduler::import_handoff(Sequence& seq, KvHandoff& handoff) {
  seq.num_offloaded_tokens = seq.num_prompt_tokens;
  seq.offloaded_blocks = std::move(handoff.blocks);
  seq.handoff_finish = seq.append_token(handoff.first_token, now());
  seq.announce_first_token = true;
  stats_.num_handoffs_imported += 1;
}

bool Scheduler::announce_handoff_token(Sequence& seq, std::vector<TokenEvent>& events) {
  seq.announce_first_token = false;
  const int32_t token = seq.last_token();
  if (seq.handoff_finish != FinishReason::none) {
    finish(seq, seq.handoff_finish, token, "", events);
    return true;
  }
  TokenEvent e;
  e.request_id = seq.request_id;
  e.index = seq.index;
  e.token_id = token;
  events.push_back(std::move(e));
  return false;
}

// Called by finish() before the KV is freed. Only a prefill that produced
// its first token hands off; any other ending tells the decode side why.
void Scheduler::export_handoff(const Sequence& seq, FinishReason reason, const std::string& error) {
  const std::string& key = seq.kv_export_key;
  const bool produced = seq.status == SequenceStatus::running && seq.num_generated_tokens() >= 1 &&
                        seq.num_computed_tokens >= seq.num_prompt_tokens;
  if (reason == FinishReason::error || reason == FinishReason::cancelled || !produced) {
    handoffs_->fail(key, "the prefill of request '" + seq.request_id + "' ended " + to_string(reason) +
                             (error.empty() ? std::string() : ": " + error));
    return;
  }
  if (!in_flight_.empty() || planning_ahead_) {  // the executor is computing: its K/V cannot be read now
    handoffs_->fail(key, "the prefill of request '" + seq.request_id +
                             "' ended while a step was in flight (a prefill replica runs without overlap)");
    return;
  }
  KvHandoff h;
  h.layout = kv_layout_;
  h.prompt_tokens.assign(seq.tokens.begin(), seq.tokens.begin() + seq.num_prompt_tokens);
  h.first_token = seq.tokens[static_cast<size_t>(seq.num_prompt_tokens)];
  const int32_t block = static_cast<int32_t>(kv_.block_size());
  h.block_size = block;
  std::vector<int32_t> table;
  kv_.block_table(seq.seq_id, table);
  try {
    for (int32_t first = 0; first < seq.num_prompt_tokens; first += block) {
      const int32_t last = std::min(first + block, seq.num_prompt_tokens);
      std::vector<int32_t> slots;
      for (int32_t p = first; p < last; ++p) slots.push_back(table.at(static_cast<size_t>(p / block)) + p % block);
      h.blocks.push_back(kv_io_->save_kv(slots));
    }
  } catch (const std::exception& e) {
    handoffs_->fail(key, "saving the K/V of request '" + seq.request_id + "' failed: " + e.what());
    return;
  }
  stats_.num_handoffs_exported += 1;
  handoffs_->put(key, std::move(h));
}

}  // namespace llmk
