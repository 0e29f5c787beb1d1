#include "core/plugin_proposer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <unordered_set>

#include "core/error.hpp"

namespace llmk {

namespace {

llmk_error blank_error() {
  llmk_error err{};
  err.status = LLMK_OK;
  err.message[0] = '\0';
  return err;
}

std::string plugin_message(const llmk_error& err) {
  return err.message[0] != '\0' ? std::string(err.message) : "status " + std::to_string(err.status);
}

}  // namespace

std::string draft_answer_defect(const llmk_draft_request& r, const int32_t* tokens, const int32_t* parents,
                                uint32_t num_nodes, uint32_t vocab_size) {
  const uint32_t capacity = r.max_nodes > 0 ? r.max_nodes : r.max_depth;
  if (num_nodes > capacity)
    return std::to_string(num_nodes) + " nodes, more than the " + std::to_string(capacity) + " asked for";
  std::vector<uint32_t> depth(num_nodes);
  std::unordered_set<uint64_t> edges;  // (parent + 1, token) of every node
  for (uint32_t j = 0; j < num_nodes; ++j) {
    const int32_t p = parents[j], t = tokens[j];
    const std::string node = "node " + std::to_string(j);
    if (p < -1 || p >= static_cast<int32_t>(j))
      return node + "'s parent " + std::to_string(p) + " is not before it (allowed: -1 up to " +
             std::to_string(static_cast<int32_t>(j) - 1) + ")";
    if (r.max_nodes == 0 && p != static_cast<int32_t>(j) - 1)
      return node + "'s parent is " + std::to_string(p) + " in a chain (max_nodes 0), where it must be " +
             std::to_string(static_cast<int32_t>(j) - 1);
    depth[j] = p < 0 ? 1 : depth[static_cast<size_t>(p)] + 1;
    if (depth[j] > r.max_depth)
      return node + " is at depth " + std::to_string(depth[j]) + ", deeper than max_depth " +
             std::to_string(r.max_depth);
    if (t < 0 || (vocab_size > 0 && static_cast<uint32_t>(t) >= vocab_size))
      return node + "'s token " + std::to_string(t) + " is outside the vocabulary [0, " +
             std::to_string(vocab_size) + ")";
    const uint64_t edge = (static_cast<uint64_t>(static_cast<uint32_t>(p + 1)) << 32) | static_cast<uint32_t>(t);
    if (!edges.insert(edge).second)
      return node + " repeats token " + std::to_string(t) + " under parent " + std::to_string(p) +
             " (siblings hold distinct tokens)";
  }
  return "";
}

std::string proposer_options_json(const SpeculativeSection& config) {
  auto options = nlohmann::json::parse(config.proposer_options, nullptr, false);
  if (!options.is_object()) options = nlohmann::json::object();
  options["prompt_lookup_min"] = config.prompt_lookup_min;
  options["prompt_lookup_max"] = config.prompt_lookup_max;
  return options.dump();
}

PluginProposer::PluginProposer(Plugin plugin, const llmk_proposer_desc& desc)
    : plugin_(std::move(plugin)), vocab_size_(desc.vocab_size), max_depth_(desc.max_depth),
      max_nodes_(desc.max_nodes) {
  const llmk_proposer_api& api = plugin_.proposer();
  char why[512] = {0};
  if (!api.supports(&desc, why, sizeof(why)))
    throw Error(ErrorCode::plugin, "plugin '" + info().name + "' cannot serve this configuration: " +
                                       (why[0] ? why : "no reason given"));
  llmk_error err = blank_error();
  self_ = api.create(&desc, &err);
  if (self_ == nullptr)
    throw Error(ErrorCode::plugin, "plugin '" + info().name + "' create failed: " + plugin_message(err));
}

PluginProposer::~PluginProposer() {
  if (self_) plugin_.proposer().destroy(self_);
}

void PluginProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) {
  std::vector<DraftTree> trees;
  ask(requests, false, trees);
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) out[i] = std::move(trees[i].tokens);
}

void PluginProposer::propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) {
  ask(requests, true, out);
}

void PluginProposer::release(uint64_t seq_id) {
  llmk_error err = blank_error();
  if (plugin_.proposer().release(self_, seq_id, &err) != LLMK_OK)
    spdlog::warn("proposer '{}': release of sequence {} failed: {}", info().name, seq_id, plugin_message(err));
}

void PluginProposer::drop(uint64_t count, std::string why) {
  const uint64_t before = num_dropped_;
  num_dropped_ += count;
  last_drop_reason_ = std::move(why);
  // The first, then each time the count passes a power of two.
  if (before == 0 || std::bit_width(before) != std::bit_width(num_dropped_))
    spdlog::warn("proposer '{}': {} answer(s) dropped so far, those sequences decoding without drafts; latest: {}",
                 info().name, num_dropped_, last_drop_reason_);
}

// Requests past the desc's limits are clamped to them (the plugin was
// promised no more); a request without tokens or drafts is answered empty
// without asking.
void PluginProposer::ask(std::span<const DraftRequest> requests, bool trees, std::vector<DraftTree>& out) {
  out.assign(requests.size(), DraftTree{});
  c_requests_.clear();
  std::vector<size_t> asked;  // c_requests_[k] is requests[asked[k]]
  size_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    if (r.tokens.empty() || r.max_tokens <= 0) continue;
    llmk_draft_request c{};
    c.seq_id = r.seq_id;
    c.tokens = r.tokens.data();
    c.num_tokens = static_cast<uint32_t>(r.tokens.size());
    c.max_depth = std::min(static_cast<uint32_t>(r.max_tokens), max_depth_);
    if (trees && r.max_nodes > 0 && max_nodes_ > 0)
      c.max_nodes = std::max(std::min(static_cast<uint32_t>(r.max_nodes), max_nodes_), c.max_depth);
    if (c.max_depth == 0) continue;
    c_requests_.push_back(c);
    asked.push_back(i);
    total += c.max_nodes > 0 ? c.max_nodes : c.max_depth;
  }
  if (c_requests_.empty()) return;
  tokens_.assign(total, 0);
  parents_.assign(total, 0);
  c_drafts_.assign(c_requests_.size(), llmk_draft_tree{});
  size_t at = 0;
  for (size_t k = 0; k < c_requests_.size(); ++k) {
    const uint32_t capacity = c_requests_[k].max_nodes > 0 ? c_requests_[k].max_nodes : c_requests_[k].max_depth;
    c_drafts_[k] = llmk_draft_tree{tokens_.data() + at, parents_.data() + at, capacity, 0};
    at += capacity;
  }
  llmk_propose_batch batch{sizeof(llmk_propose_batch), static_cast<uint32_t>(c_requests_.size()),
                           c_requests_.data(), c_drafts_.data()};
  llmk_error err = blank_error();
  if (const int status = plugin_.proposer().propose(self_, &batch, &err); status != LLMK_OK) {
    drop(c_requests_.size(), "propose failed: " + plugin_message(err));
    return;
  }
  for (size_t k = 0; k < c_requests_.size(); ++k) {
    const llmk_draft_tree& d = c_drafts_[k];
    const std::string defect = draft_answer_defect(c_requests_[k], d.tokens, d.parents, d.num_nodes, vocab_size_);
    if (!defect.empty()) {
      drop(1, "sequence " + std::to_string(c_requests_[k].seq_id) + ": " + defect);
      continue;
    }
    DraftTree& tree = out[asked[k]];
    tree.tokens.assign(d.tokens, d.tokens + d.num_nodes);
    tree.parents.assign(d.parents, d.parents + d.num_nodes);
  }
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeSection& config, PluginRegistry* plugins,
                                        uint32_t vocab_size) {
  if (config.method == "none" || config.method == "draft" || config.method == "medusa") return nullptr;
  if (config.method != "ngram")
    throw Error(ErrorCode::invalid_config,
                "speculative.method: '" + config.method + "' is not one of none, ngram, draft, medusa");
  std::optional<PluginRegistry> own;
  if (plugins == nullptr) plugins = &own.emplace();
  const std::string options = proposer_options_json(config);
  llmk_proposer_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.vocab_size = vocab_size;
  desc.max_depth = config.num_tokens;
  desc.max_nodes = config.tree_width > 1 ? (config.tree_nodes != 0 ? config.tree_nodes
                                                                    : config.num_tokens * config.tree_width)
                                         : 0;
  desc.tree_width = config.tree_width;
  desc.options = options.c_str();
  try {
    return std::make_unique<PluginProposer>(plugins->load(config.proposer, LLMK_PLUGIN_PROPOSER), desc);
  } catch (const Error& e) {
    throw Error(e.code(), "speculative.proposer: " + std::string(e.what()));
  }
}

}  // namespace llmk
