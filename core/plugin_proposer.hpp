// A proposer plugin (plugins/api/llmk_proposer.h) behind the engine's
// Proposer interface (core/speculation.hpp): the scheduler's requests go to
// the plugin as one batch, its answers come back as DraftTrees after the
// host has checked each against the header's rules. The host never trusts
// an answer: one that breaks a rule, or a call that fails, leaves its
// sequences without drafts for the step (the output is the same either way)
// and is logged naming the plugin and why.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/plugin_loader.hpp"
#include "core/speculation.hpp"
#include "plugins/api/llmk_proposer.h"

namespace llmk {

// Why an answer breaks the header's rules for request r, or "" when it
// keeps them all: capacity, parents before children, depth, a chain where
// one was asked, distinct siblings, tokens in [0, vocab_size) (vocab_size
// 0: not checked).
std::string draft_answer_defect(const llmk_draft_request& r, const int32_t* tokens, const int32_t* parents,
                                uint32_t num_nodes, uint32_t vocab_size);

// The options JSON a proposer is created with: speculative.proposer_options
// plus the section's prompt_lookup_min and prompt_lookup_max.
std::string proposer_options_json(const SpeculativeSection& config);

class PluginProposer final : public Proposer {
 public:
  // Throws Error(plugin) with supports()' reason or create's message.
  PluginProposer(Plugin plugin, const llmk_proposer_desc& desc);
  ~PluginProposer() override;
  PluginProposer(const PluginProposer&) = delete;
  PluginProposer& operator=(const PluginProposer&) = delete;

  using Proposer::propose;
  // Chains: every request asks max_nodes 0.
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override;
  void propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) override;
  void release(uint64_t seq_id) override;

  const PluginInfo& info() const { return plugin_.info(); }
  // Answers dropped so far (a failed call counts each of its requests), and
  // why the latest was.
  uint64_t num_dropped() const { return num_dropped_; }
  const std::string& last_drop_reason() const { return last_drop_reason_; }

 private:
  void ask(std::span<const DraftRequest> requests, bool trees, std::vector<DraftTree>& out);
  void drop(uint64_t count, std::string why);

  Plugin plugin_;
  void* self_ = nullptr;
  uint32_t vocab_size_ = 0;
  uint32_t max_depth_ = 0;
  uint32_t max_nodes_ = 0;
  uint64_t num_dropped_ = 0;
  std::string last_drop_reason_;
  // Reused per call: the C requests and the answers' storage.
  std::vector<llmk_draft_request> c_requests_;
  std::vector<llmk_draft_tree> c_drafts_;
  std::vector<int32_t> tokens_, parents_;
};

}  // namespace llmk
