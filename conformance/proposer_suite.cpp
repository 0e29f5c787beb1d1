// The proposer suite: the plugin, called through its C table as the engine
// calls it, on batches of sequences built so that a prompt-lookup proposer
// finds continuations (phrases that recur). Every answer is held to
// llmk_proposer.h's rules (draft_answer_defect, core/plugin_proposer.hpp)
// with guard cells past each answer's capacity; then the same batch again,
// on the same proposer and on a second one made from the same desc, must
// answer the same; each sequence asked alone must answer as in the batch;
// releasing ids the proposer never saw, twice, or all of them, must succeed
// and leave answers unchanged. Chains, then trees of two sizes; a desc the
// plugin refuses through supports() is counted as unsupported.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conformance/suite.hpp"
#include "core/plugin_proposer.hpp"

namespace llmk::conformance {
namespace {

constexpr uint32_t kVocab = 64;
constexpr uint32_t kNumSequences = 48;
constexpr int32_t kGuard = 0x7eadbeef;  // written past every answer's capacity, must stay
constexpr uint32_t kNumGuards = 4;
constexpr const char* kOptions = R"({"prompt_lookup_min":1,"prompt_lookup_max":3})";

struct Answer {
  std::vector<int32_t> tokens, parents;
  bool operator==(const Answer&) const = default;
};

// The answers of one call, or why it failed.
struct CallResult {
  std::vector<Answer> answers;
  std::vector<std::string> defects;  // one per malformed answer: "sequence N: why"
  std::string error;                 // the call's status and message when not OK
};

// Sequences of recurring phrases and stray tokens, lengths 1 to ~200 (the
// first few short: one, two and three tokens).
std::vector<std::vector<int32_t>> make_sequences(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto below = [&](uint32_t n) { return static_cast<int32_t>(rng() % n); };
  std::vector<std::vector<int32_t>> phrases(6);
  for (auto& p : phrases) {
    p.resize(static_cast<size_t>(2 + below(5)));
    for (auto& t : p) t = below(kVocab);
  }
  std::vector<std::vector<int32_t>> out(kNumSequences);
  for (uint32_t i = 0; i < kNumSequences; ++i) {
    const size_t length = i < 3 ? i + 1 : static_cast<size_t>(4 + below(196));
    auto& s = out[i];
    while (s.size() < length) {
      if (below(3) == 0) {
        s.push_back(below(kVocab));
      } else {
        const auto& p = phrases[static_cast<size_t>(below(static_cast<uint32_t>(phrases.size())))];
        s.insert(s.end(), p.begin(), p.end());
      }
    }
    s.resize(length);
  }
  return out;
}

class Instance {
 public:
  Instance(const Plugin& plugin, const llmk_proposer_desc& desc) : api_(plugin.proposer()) {
    llmk_error err{};
    self_ = api_.create(&desc, &err);
    if (self_ == nullptr) error_ = "create failed: " + std::string(err.message);
  }
  ~Instance() {
    if (self_) api_.destroy(self_);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  const std::string& error() const { return error_; }

  CallResult propose(const std::vector<llmk_draft_request>& requests) {
    CallResult r;
    std::vector<std::vector<int32_t>> tokens(requests.size()), parents(requests.size());
    std::vector<llmk_draft_tree> drafts(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const uint32_t capacity = requests[i].max_nodes > 0 ? requests[i].max_nodes : requests[i].max_depth;
      tokens[i].assign(capacity + kNumGuards, kGuard);
      parents[i].assign(capacity + kNumGuards, kGuard);
      drafts[i] = llmk_draft_tree{tokens[i].data(), parents[i].data(), capacity, 0};
    }
    const llmk_propose_batch batch{sizeof(llmk_propose_batch), static_cast<uint32_t>(requests.size()),
                                   requests.data(), drafts.data()};
    llmk_error err{};
    if (const int status = api_.propose(self_, &batch, &err); status != LLMK_OK) {
      r.error = "propose returned status " + std::to_string(status) + ": " + err.message;
      return r;
    }
    r.answers.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const llmk_draft_tree& d = drafts[i];
      std::string defect = draft_answer_defect(requests[i], d.tokens, d.parents, d.num_nodes, kVocab);
      const auto untouched = [&](const std::vector<int32_t>& v) {
        return std::all_of(v.begin() + std::min<size_t>(d.num_nodes, d.capacity), v.end(),
                           [](int32_t x) { return x == kGuard; });
      };
      if (defect.empty() && (!untouched(tokens[i]) || !untouched(parents[i])))
        defect = "wrote past its " + std::to_string(d.num_nodes) + " nodes (capacity " +
                 std::to_string(d.capacity) + ")";
      if (!defect.empty()) {
        r.defects.push_back("sequence " + std::to_string(requests[i].seq_id) + ": " + defect);
        continue;
      }
      r.answers[i].tokens.assign(d.tokens, d.tokens + d.num_nodes);
      r.answers[i].parents.assign(d.parents, d.parents + d.num_nodes);
    }
    return r;
  }

  std::string release(uint64_t seq_id) {
    llmk_error err{};
    if (const int status = api_.release(self_, seq_id, &err); status != LLMK_OK)
      return "release of " + std::to_string(seq_id) + " returned status " + std::to_string(status) + ": " +
             err.message;
    return "";
  }

 private:
  const llmk_proposer_api& api_;
  void* self_ = nullptr;
  std::string error_;
};

struct Shape {
  std::string name;
  uint32_t max_depth, max_nodes, tree_width;
};

// Depths 1..max_depth in turn; in trees, node budgets from max_depth up to
// max_nodes, and every fifth request a chain.
std::vector<llmk_draft_request> make_requests(const Shape& shape, const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<llmk_draft_request> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    llmk_draft_request& r = out[i];
    r.seq_id = 1000 + i;
    r.tokens = seqs[i].data();
    r.num_tokens = static_cast<uint32_t>(seqs[i].size());
    r.max_depth = 1 + static_cast<uint32_t>(i % shape.max_depth);
    if (shape.max_nodes > 0 && i % 5 != 4)
      r.max_nodes = std::max(r.max_depth, shape.max_nodes - static_cast<uint32_t>(i % shape.max_nodes) / 2);
  }
  return out;
}

CaseResult verdict(std::string name, std::string measure, const std::vector<std::string>& problems) {
  CaseResult c;
  c.name = std::move(name);
  c.measure = std::move(measure);
  c.error = static_cast<double>(problems.size());
  c.tolerance = 0;
  c.status = problems.empty() ? CaseStatus::passed : CaseStatus::failed;
  if (!problems.empty()) c.detail = problems.front();
  return c;
}

// Appends "<what>: sequence N answered otherwise" for each answer of b
// unlike a's, and b's own failures.
void compare(const CallResult& a, const CallResult& b, const std::vector<llmk_draft_request>& requests,
             const std::string& what, std::vector<std::string>& problems) {
  if (!b.error.empty()) {
    problems.push_back(what + ": " + b.error);
    return;
  }
  for (const auto& d : b.defects) problems.push_back(what + ": " + d);
  for (size_t i = 0; i < requests.size() && i < a.answers.size() && i < b.answers.size(); ++i)
    if (a.answers[i] != b.answers[i])
      problems.push_back(what + ": sequence " + std::to_string(requests[i].seq_id) + " answered otherwise (" +
                         std::to_string(b.answers[i].tokens.size()) + " nodes; the first call " +
                         std::to_string(a.answers[i].tokens.size()) + ")");
}

void run_shape(const Plugin& plugin, const Shape& shape, const std::vector<std::vector<int32_t>>& seqs,
               SuiteResult& result) {
  const llmk_proposer_desc desc{sizeof(llmk_proposer_desc), kVocab, shape.max_depth, shape.max_nodes,
                                shape.tree_width, kOptions};
  char why[512] = {0};
  if (!plugin.proposer().supports(&desc, why, sizeof(why))) {
    CaseResult c;
    c.name = shape.name;
    c.status = CaseStatus::unsupported;
    c.detail = why[0] ? why : "refused, no reason given";
    result.cases.push_back(c);
    return;
  }
  Instance first(plugin, desc), second(plugin, desc);
  if (!first.error().empty() || !second.error().empty()) {
    result.cases.push_back(verdict(shape.name + ": create", "failures", {first.error() + second.error()}));
    return;
  }
  const auto requests = make_requests(shape, seqs);
  const CallResult a = first.propose(requests);
  std::vector<std::string> problems = a.defects;
  if (!a.error.empty()) problems.push_back(a.error);
  result.cases.push_back(verdict(shape.name + ", " + std::to_string(requests.size()) + " sequences in one call",
                                 "malformed answers", problems));
  if (!a.error.empty()) return;
  size_t num_drafted = 0, num_nodes = 0;
  for (const auto& x : a.answers) {
    num_drafted += x.tokens.empty() ? 0 : 1;
    num_nodes += x.tokens.size();
  }
  result.notes.push_back(shape.name + ": drafted for " + std::to_string(num_drafted) + " of " +
                         std::to_string(requests.size()) + " sequences, " + std::to_string(num_nodes) + " nodes");

  problems.clear();
  compare(a, first.propose(requests), requests, "asked again", problems);
  compare(a, second.propose(requests), requests, "a second proposer", problems);
  result.cases.push_back(verdict(shape.name + ": the same call again, and on a second proposer, answers the same",
                                 "answers that differ or break a rule", problems));

  problems.clear();
  CallResult alone;
  for (const auto& r : requests) {
    CallResult one = first.propose({r});
    if (!one.error.empty()) {
      alone.error = one.error;
      break;
    }
    for (auto& d : one.defects) alone.defects.push_back(std::move(d));
    alone.answers.push_back(one.answers.empty() ? Answer{} : std::move(one.answers[0]));
  }
  compare(a, alone, requests, "asked alone", problems);
  result.cases.push_back(verdict(shape.name + ": each sequence asked alone answers as in the batch",
                                 "answers that differ or break a rule", problems));

  problems.clear();
  for (const uint64_t id : {uint64_t{0}, uint64_t{7}, uint64_t{0xffffffffffffffffull}, uint64_t{999}})
    if (auto e = first.release(id); !e.empty()) problems.push_back("an id never proposed for: " + e);
  for (const auto& r : requests)
    for (int twice = 0; twice < 2; ++twice)
      if (auto e = first.release(r.seq_id); !e.empty()) problems.push_back((twice ? "twice: " : "") + e);
  compare(a, first.propose(requests), requests, "after the releases", problems);
  result.cases.push_back(verdict(shape.name + ": releases of unknown, ended and twice-ended ids are harmless",
                                 "failures", problems));
}

// An empty batch, then one-token sequences at depth 1 and at the desc's
// limits.
void run_edges(const Plugin& plugin, SuiteResult& result) {
  const llmk_proposer_desc desc{sizeof(llmk_proposer_desc), kVocab, 8, 32, 4, kOptions};
  char why[512] = {0};
  if (!plugin.proposer().supports(&desc, why, sizeof(why))) {
    result.cases.push_back(CaseResult{"edge requests", CaseStatus::unsupported, "", 0, 0, why});
    return;
  }
  Instance p(plugin, desc);
  std::vector<std::string> problems;
  if (!p.error().empty()) problems.push_back(p.error());
  if (problems.empty()) {
    if (auto r = p.propose({}); !r.error.empty()) problems.push_back("an empty batch: " + r.error);
    const std::vector<int32_t> one{5}, pair{5, 5}, runs{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
    const std::vector<llmk_draft_request> requests{
        {1, one.data(), 1, 1, 0, 0},   {2, one.data(), 1, 8, 32, 0}, {3, pair.data(), 2, 1, 1, 0},
        {4, pair.data(), 2, 8, 8, 0},  {5, runs.data(), 12, 8, 0, 0}, {6, runs.data(), 12, 8, 32, 0},
        {7, runs.data(), 12, 1, 32, 0}};
    const CallResult r = p.propose(requests);
    if (!r.error.empty()) problems.push_back(r.error);
    for (const auto& d : r.defects) problems.push_back(d);
  }
  result.cases.push_back(
      verdict("edge requests: an empty batch, one-token sequences, depth 1, trees of one node", "failures", problems));
}

}  // namespace

SuiteResult run_proposer_suite(const Plugin& plugin, const SuiteOptions& /*options*/) {
  SuiteResult result;
  result.plugin = plugin.info().name;
  result.device = "cpu";  // token ids in host memory
  const auto seqs = make_sequences(42);
  const Shape shapes[] = {{"chains of up to 4", 4, 0, 1},
                          {"trees of width 4, depth 4, up to 16 nodes", 4, 16, 4},
                          {"trees of width 16, depth 8, up to 64 nodes", 8, 64, 16}};
  for (const auto& shape : shapes) run_shape(plugin, shape, seqs, result);
  run_edges(plugin, result);
  return result;
}

}  // namespace llmk::conformance
