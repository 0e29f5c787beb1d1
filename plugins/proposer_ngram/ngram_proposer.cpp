// The plugin "proposer.ngram": prompt lookup (core/prompt_lookup.hpp) behind
// the proposer table. Its options are the engine's prompt-lookup settings,
// {"prompt_lookup_min": 2, "prompt_lookup_max": 4} when absent; the tree's
// width is the desc's tree_width. It keeps nothing per sequence.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "core/prompt_lookup.hpp"
#include "plugins/api/plugin_helpers.hpp"

namespace llmk::proposer {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "proposer.ngram: " + message);
}

// Throws std::runtime_error naming the bad key or value.
prompt_lookup::Params parse_params(const llmk_proposer_desc& desc) {
  prompt_lookup::Params p;
  p.width = static_cast<int32_t>(std::max<uint32_t>(desc.tree_width, 1));
  if (desc.options != nullptr && desc.options[0] != '\0') {
    const auto j = nlohmann::json::parse(desc.options, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw std::runtime_error("proposer.ngram options are not a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (key != "prompt_lookup_min" && key != "prompt_lookup_max")
        throw std::runtime_error("proposer.ngram: unknown option '" + key +
                                 "' (known: prompt_lookup_min, prompt_lookup_max)");
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 64)
        throw std::runtime_error("proposer.ngram: option '" + key + "' must be an integer in 1..64");
      (key == "prompt_lookup_min" ? p.min_n : p.max_n) = value.get<int32_t>();
    }
  }
  if (p.min_n > p.max_n)
    throw std::runtime_error("proposer.ngram: prompt_lookup_min " + std::to_string(p.min_n) +
                             " exceeds prompt_lookup_max " + std::to_string(p.max_n));
  if (p.width > 64) throw std::runtime_error("proposer.ngram: tree_width " + std::to_string(p.width) + " exceeds 64");
  return p;
}

class NgramProposer {
 public:
  static constexpr const char* kName = "proposer.ngram";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "prompt lookup: drafts what followed the latest earlier occurrence of the sequence's last tokens; "
      "token trees of several occurrences";
  static constexpr const char* kCapabilities = R"({"token_trees":true})";

  static bool supports(const llmk_proposer_desc& desc, std::string& why) {
    try {
      parse_params(desc);
    } catch (const std::exception& e) {
      why = e.what();
      return false;
    }
    return true;
  }

  explicit NgramProposer(const llmk_proposer_desc& desc) {
    std::string why;
    if (!supports(desc, why)) throw plugin::Error(LLMK_ERR_UNSUPPORTED, why);
    params_ = parse_params(desc);
  }

  void propose(const llmk_propose_batch& batch) {
    if (batch.num_requests > 0 && (batch.requests == nullptr || batch.drafts == nullptr))
      invalid("a batch of " + std::to_string(batch.num_requests) + " requests without its arrays");
    for (uint32_t i = 0; i < batch.num_requests; ++i) answer(batch.requests[i], batch.drafts[i]);
  }

  void release(uint64_t /*seq_id*/) {}  // nothing kept per sequence

 private:
  void answer(const llmk_draft_request& r, llmk_draft_tree& out) {
    out.num_nodes = 0;
    if (r.num_tokens > 0 && r.tokens == nullptr) invalid("sequence " + std::to_string(r.seq_id) + " has no tokens");
    const std::span<const int32_t> tokens(r.tokens, r.num_tokens);
    const auto depth = static_cast<int32_t>(std::min(r.max_depth, out.capacity));
    if (params_.width > 1 && r.max_nodes > 0) {
      const auto max_nodes = static_cast<int32_t>(std::min(r.max_nodes, out.capacity));
      prompt_lookup::tree(params_, tokens, depth, max_nodes, tree_tokens_, tree_parents_);
    } else {
      chain_.clear();
      prompt_lookup::chain(params_, tokens, depth, chain_);
      tree_tokens_ = chain_;
      tree_parents_.resize(chain_.size());
      for (size_t j = 0; j < chain_.size(); ++j) tree_parents_[j] = static_cast<int32_t>(j) - 1;
    }
    std::copy(tree_tokens_.begin(), tree_tokens_.end(), out.tokens);
    std::copy(tree_parents_.begin(), tree_parents_.end(), out.parents);
    out.num_nodes = static_cast<uint32_t>(tree_tokens_.size());
  }

  prompt_lookup::Params params_;
  std::vector<int32_t> chain_, tree_tokens_, tree_parents_;
};

}  // namespace
}  // namespace llmk::proposer

LLMK_EXPORT_PROPOSER_PLUGIN(llmk::proposer::NgramProposer)
