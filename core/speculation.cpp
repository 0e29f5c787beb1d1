#include "core/speculation.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/request.hpp"

namespace llmk {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n)
    throw Error(ErrorCode::invalid_config, "speculative: prompt_lookup_min " + std::to_string(min_n) +
                                               " and prompt_lookup_max " + std::to_string(max_n) +
                                               " must satisfy 1 <= min <= max");
}

void NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const {
  const auto len = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0) return;
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Latest earlier occurrence first: [start, start + n) with start + n < len.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, tokens.data() + start)) continue;
      const int64_t from = start + n, to = std::min<int64_t>(len, from + max_tokens);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

void NgramProposer::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) {
  out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) propose(requests[i].tokens, requests[i].max_tokens, out[i]);
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeSection& config) {
  if (config.method == "ngram")
    return std::make_unique<NgramProposer>(static_cast<int32_t>(config.prompt_lookup_min),
                                           static_cast<int32_t>(config.prompt_lookup_max));
  if (config.method == "none" || config.method == "draft") return nullptr;
  throw Error(ErrorCode::invalid_config, "speculative.method: '" + config.method + "' is not one of none, ngram, draft");
}

int32_t num_accepted_greedy(std::span<const int32_t> drafts, std::span<const int32_t> choices) {
  int32_t a = 0;
  while (static_cast<size_t>(a) < drafts.size() && static_cast<size_t>(a) < choices.size() &&
         drafts[static_cast<size_t>(a)] == choices[static_cast<size_t>(a)])
    ++a;
  return a;
}

// The section's own ranges and what it cannot run beside (pipelined steps,
// the static policy). Both executors verify drafts.
void validate_speculative(const EngineConfig& c) {
  const SpeculativeSection& s = c.speculative;
  auto fail = [](const std::string& key, const std::string& why) {
    throw Error(ErrorCode::invalid_config, key + ": " + why);
  };
  if (s.method != "none" && s.method != "ngram" && s.method != "draft")
    fail("speculative.method", "'" + s.method + "' is not one of none, ngram, draft");
  if (s.draft_sampling != "greedy" && s.draft_sampling != "sampled")
    fail("speculative.draft_sampling", "'" + s.draft_sampling + "' is not one of greedy, sampled");
  if (s.draft_sampling == "sampled" && c.executor.device != "cpu")
    fail("speculative.draft_sampling", "sampled drafts are verified by the CPU sampler only; executor.device is '" +
                                           c.executor.device + "' (use greedy)");
  if (s.method == "draft" && s.draft_model.empty())
    fail("speculative.draft_model", "is empty; speculative.method draft needs the draft model's path");
  if (s.method != "draft" && !s.draft_model.empty())
    fail("speculative.draft_model", "is set but speculative.method is '" + s.method + "' (set it to draft)");
  if (s.num_tokens < 1 || s.num_tokens > static_cast<uint32_t>(sampling_limits::max_speculative_tokens))
    fail("speculative.num_tokens", std::to_string(s.num_tokens) + " is out of range (allowed: 1 to " +
                                       std::to_string(sampling_limits::max_speculative_tokens) + ")");
  if (s.prompt_lookup_min < 1 || s.prompt_lookup_min > s.prompt_lookup_max)
    fail("speculative.prompt_lookup_min", std::to_string(s.prompt_lookup_min) +
                                              " must be at least 1 and at most speculative.prompt_lookup_max (" +
                                              std::to_string(s.prompt_lookup_max) + ")");
  if (s.prompt_lookup_max > 64)
    fail("speculative.prompt_lookup_max", std::to_string(s.prompt_lookup_max) + " is out of range (allowed: up to 64)");
  if (s.method == "none") return;
  if (c.parallel.pipeline > 1 && c.parallel.steps_in_flight != 1)
    fail("speculative.method", "'" + s.method + "' does not run with pipelined steps in flight (parallel.pipeline " +
                                   std::to_string(c.parallel.pipeline) + ", parallel.steps_in_flight " +
                                   std::to_string(c.parallel.steps_in_flight) + "; set it to 1)");
  if (c.scheduler.policy != "continuous")
    fail("speculative.method", "'" + s.method + "' needs scheduler.policy continuous (it is '" + c.scheduler.policy +
                                   "')");
}

}  // namespace llmk
