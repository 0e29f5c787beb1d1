#include "core/medusa_proposer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <queue>
#include <set>

#include "core/error.hpp"

namespace llmk {

// Per request: its depth (0: no hidden row, no drafts) and each head's top
// k tokens with their log-probabilities, best first.
struct MedusaProposer::Candidates {
  int32_t depth = 0;
  int32_t k = 0;
  std::vector<int32_t> tokens;  // [depth, k]
  std::vector<double> logp;     // [depth, k]
};

MedusaProposer::MedusaProposer(std::shared_ptr<const MedusaHeads> heads, int32_t top_k,
                               std::vector<std::vector<int32_t>> choices)
    : heads_(std::move(heads)), top_k_(std::max(1, std::min(top_k, heads_->vocab_size()))) {
  // Medusa's order: by depth, then by path; each path's parent is its prefix.
  std::sort(choices.begin(), choices.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::map<std::vector<int32_t>, int32_t> index;
  for (const auto& path : choices) {
    for (int32_t r : path) choice_top_k_ = std::max(choice_top_k_, r + 1);
    const std::vector<int32_t> prefix(path.begin(), path.end() - 1);
    const auto parent = index.find(prefix);
    choice_parents_.push_back(prefix.empty() ? -1 : parent == index.end() ? -2 : parent->second);
    if (choice_parents_.back() == -2)
      throw Error(ErrorCode::invalid_config, "speculative.medusa_choices: a path's prefix is not listed");
    index[path] = static_cast<int32_t>(choices_.size());
    choices_.push_back(path);
  }
  if (choice_top_k_ > heads_->vocab_size())
    throw Error(ErrorCode::invalid_config, "speculative.medusa_choices: rank " + std::to_string(choice_top_k_ - 1) +
                                               " is past the vocabulary (" + std::to_string(heads_->vocab_size()) +
                                               " tokens)");
}

void MedusaProposer::observe(uint64_t seq_id, int32_t position, std::span<const float> hidden) {
  Seen& s = seen_[seq_id];
  s.position = position;
  s.hidden.assign(hidden.begin(), hidden.end());
}

void MedusaProposer::release(uint64_t seq_id) { seen_.erase(seq_id); }

const std::vector<float>* MedusaProposer::hidden_of(uint64_t seq_id, int32_t& position) const {
  const auto it = seen_.find(seq_id);
  position = it == seen_.end() ? -1 : it->second.position;
  return it == seen_.end() ? nullptr : &it->second.hidden;
}

void MedusaProposer::rank(std::span<const DraftRequest> requests, int32_t k, std::vector<Candidates>& out) {
  const int32_t h = heads_->hidden_size(), vocab = heads_->vocab_size();
  out.assign(requests.size(), Candidates{});
  std::vector<size_t> rows;  // requests with a current hidden row
  int32_t max_depth = 0;
  x_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    const auto it = seen_.find(r.seq_id);
    if (it == seen_.end() || it->second.position + 2 != static_cast<int64_t>(r.tokens.size())) continue;
    if (static_cast<int32_t>(it->second.hidden.size()) != h) continue;
    out[i].depth = std::min(r.max_tokens, heads_->num_heads());
    if (out[i].depth <= 0) continue;
    out[i].k = k;
    max_depth = std::max(max_depth, out[i].depth);
    rows.push_back(i);
    x_.insert(x_.end(), it->second.hidden.begin(), it->second.hidden.end());
  }
  if (rows.empty()) return;
  for (size_t i : rows) {
    out[i].tokens.resize(static_cast<size_t>(out[i].depth * k));
    out[i].logp.resize(out[i].tokens.size());
  }
  const auto n = static_cast<int32_t>(rows.size());
  logits_.resize(static_cast<size_t>(n) * static_cast<size_t>(vocab));
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int32_t d = 0; d < max_depth; ++d) {
    heads_->forward(d, x_.data(), n, logits_.data(), scratch_);
    for (int32_t row = 0; row < n; ++row) {
      Candidates& c = out[rows[static_cast<size_t>(row)]];
      if (d >= c.depth) continue;
      const float* l = logits_.data() + static_cast<size_t>(row) * static_cast<size_t>(vocab);
      // Top k by logit, the lower id first among equals; log-softmax over the vocabulary.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [l](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
      const double top = l[order[0]];
      double sum = 0;
      for (int32_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(l[v]) - top);
      const double log_norm = top + std::log(sum);
      for (int32_t j = 0; j < k; ++j) {
        const auto at = static_cast<size_t>(d * k + j);
        c.tokens[at] = order[static_cast<size_t>(j)];
        c.logp[at] = static_cast<double>(l[order[static_cast<size_t>(j)]]) - log_norm;
      }
    }
  }
}

void MedusaProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) {
  std::vector<Candidates> ranked;
  rank(requests, 1, ranked);
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) out[i].assign(ranked[i].tokens.begin(), ranked[i].tokens.end());
}

void MedusaProposer::tree_from_choices(const Candidates& c, int32_t max_nodes, DraftTree& out) const {
  out.clear();
  for (size_t j = 0; j < choices_.size() && out.size() < max_nodes; ++j) {
    const auto depth = static_cast<int32_t>(choices_[j].size());
    if (depth > c.depth) break;  // sorted by depth: the rest are deeper
    out.tokens.push_back(c.tokens[static_cast<size_t>((depth - 1) * c.k + choices_[j].back())]);
    out.parents.push_back(choice_parents_[j]);
  }
}

// Node scores are sums of log-probabilities along the path, so a child never
// beats its parent nor a sibling of higher rank its elder: taking the best
// candidate each time, then offering its first child and its next sibling,
// yields the max_nodes best nodes of the product tree, parents first.
void MedusaProposer::best_first_tree(const Candidates& c, int32_t max_nodes, DraftTree& out) const {
  out.clear();
  struct Candidate {
    double score, parent_score;
    int32_t parent, depth, rank;
    uint64_t order;  // ties: the one offered first
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.order > b.order;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  uint64_t offered = 0;
  auto logp = [&](int32_t d, int32_t r) { return c.logp[static_cast<size_t>(d * c.k + r)]; };
  queue.push(Candidate{logp(0, 0), 0.0, -1, 0, 0, offered++});
  while (!queue.empty() && out.size() < max_nodes) {
    const Candidate best = queue.top();
    queue.pop();
    out.tokens.push_back(c.tokens[static_cast<size_t>(best.depth * c.k + best.rank)]);
    out.parents.push_back(best.parent);
    const int32_t node = out.size() - 1;
    if (best.depth + 1 < c.depth)
      queue.push(Candidate{best.score + logp(best.depth + 1, 0), best.score, node, best.depth + 1, 0, offered++});
    if (best.rank + 1 < c.k)
      queue.push(Candidate{best.parent_score + logp(best.depth, best.rank + 1), best.parent_score, best.parent,
                           best.depth, best.rank + 1, offered++});
  }
}

void MedusaProposer::propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) {
  std::vector<Candidates> ranked;
  const bool fixed = !choices_.empty();
  rank(requests, fixed ? choice_top_k_ : top_k_, ranked);
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Candidates& c = ranked[i];
    out[i].clear();
    if (c.depth <= 0) continue;
    if (requests[i].max_nodes <= 0) {  // a chain: each head's best
      for (int32_t d = 0; d < c.depth; ++d) out[i].tokens.push_back(c.tokens[static_cast<size_t>(d * c.k)]);
      for (int32_t j = 0; j < out[i].size(); ++j) out[i].parents.push_back(j - 1);
    } else if (fixed) {
      tree_from_choices(c, requests[i].max_nodes, out[i]);
    } else {
      best_first_tree(c, requests[i].max_nodes, out[i]);
    }
  }
}

std::vector<std::vector<int32_t>> parse_medusa_choices(const std::string& text) {
  const std::string key = "speculative.medusa_choices";
  auto fail = [&](const std::string& why) { throw Error(ErrorCode::invalid_config, key + ": " + why); };
  std::vector<std::vector<int32_t>> paths;
  if (text.empty()) return paths;
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_array() || doc.empty())
    fail("'" + text.substr(0, 80) + "' is not a JSON list of paths such as [[0], [0, 0], [1]]");
  std::set<std::vector<int32_t>> seen;
  for (const auto& p : doc) {
    if (!p.is_array() || p.empty()) fail("every path must be a non-empty list of ranks");
    std::vector<int32_t> path;
    for (const auto& r : p) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= 1024)
        fail("rank " + r.dump() + " is not an integer from 0 to 1023");
      path.push_back(r.get<int32_t>());
    }
    if (!seen.insert(path).second) fail("path " + p.dump() + " is listed twice");
    paths.push_back(std::move(path));
  }
  if (paths.size() > static_cast<size_t>(sampling_limits::max_speculative_tokens))
    fail(std::to_string(paths.size()) + " paths; at most " + std::to_string(sampling_limits::max_speculative_tokens) +
         " draft nodes a step");
  for (const auto& path : paths)
    if (path.size() > 1 && !seen.count(std::vector<int32_t>(path.begin(), path.end() - 1))) {
      std::string s = "[";
      for (size_t i = 0; i < path.size(); ++i) s += (i ? ", " : "") + std::to_string(path[i]);
      fail("path " + s + "]'s prefix is not listed (every path's parent must be)");
    }
  return paths;
}

void validate_medusa(const EngineConfig& c) {
  const SpeculativeSection& s = c.speculative;
  auto fail = [](const std::string& key, const std::string& why) {
    throw Error(ErrorCode::invalid_config, key + ": " + why);
  };
  if (s.method != "medusa") {
    if (!s.medusa_heads.empty())
      fail("speculative.medusa_heads", "is set but speculative.method is '" + s.method + "' (set it to medusa)");
    if (!s.medusa_choices.empty())
      fail("speculative.medusa_choices", "is set but speculative.method is '" + s.method + "' (set it to medusa)");
    return;
  }
  if (s.medusa_heads.empty())
    fail("speculative.medusa_heads", "is empty; speculative.method medusa needs the heads' file or directory");
  if (s.medusa_top_k < 1 || s.medusa_top_k > 32)
    fail("speculative.medusa_top_k", std::to_string(s.medusa_top_k) + " is out of range (allowed: 1 to 32)");
  parse_medusa_choices(s.medusa_choices);
  if (c.executor.device != "cpu")
    fail("speculative.method", "'medusa' reads the target's hidden states, which only the CPU executor hands back "
                               "(executor.device is '" + c.executor.device + "')");
  if (c.parallel.tensor > 1 || c.parallel.pipeline > 1)
    fail("speculative.method", "'medusa' reads the target's hidden states, which a parallel job does not hand back "
                               "(parallel.tensor " + std::to_string(c.parallel.tensor) + ", parallel.pipeline " +
                               std::to_string(c.parallel.pipeline) + ")");
}

std::unique_ptr<MedusaProposer> make_medusa_proposer(const SpeculativeSection& config, const ModelConfig& target) {
  auto heads = std::make_shared<const MedusaHeads>(
      MedusaHeads::load(config.medusa_heads, target.hidden_size, target.vocab_size));
  return std::make_unique<MedusaProposer>(std::move(heads), static_cast<int32_t>(config.medusa_top_k),
                                          parse_medusa_choices(config.medusa_choices));
}

}  // namespace llmk
