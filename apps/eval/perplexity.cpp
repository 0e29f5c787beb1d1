#include "apps/eval/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace llmk::eval {

ChunkPlan plan_chunks(int64_t num_tokens, int32_t ctx, int32_t max_chunks, int32_t bos_id) {
  if (ctx < 4) throw Error(ErrorCode::invalid_argument, "eval: --ctx " + std::to_string(ctx) + " is below 4");
  if (num_tokens < 2 * static_cast<int64_t>(ctx))
    throw Error(ErrorCode::invalid_argument, "eval: the text is " + std::to_string(num_tokens) +
                                                 " tokens; a context of " + std::to_string(ctx) + " needs at least " +
                                                 std::to_string(2 * static_cast<int64_t>(ctx)));
  if (max_chunks == 0 || max_chunks < -1)
    throw Error(ErrorCode::invalid_argument, "eval: --chunks " + std::to_string(max_chunks) + " (want >= 1, or -1)");
  ChunkPlan p;
  p.ctx = ctx;
  const int64_t all = num_tokens / ctx;
  p.num_chunks = static_cast<int32_t>(max_chunks < 0 ? all : std::min<int64_t>(all, max_chunks));
  p.first_scored = ctx / 2;
  p.bos_id = bos_id;
  return p;
}

std::vector<int32_t> chunk_input(std::span<const int32_t> tokens, const ChunkPlan& plan, int32_t chunk) {
  const auto start = tokens.begin() + static_cast<int64_t>(chunk) * plan.ctx;
  std::vector<int32_t> ids(start, start + plan.ctx);
  if (plan.bos_id >= 0) ids[0] = plan.bos_id;
  return ids;
}

RowScore score_row(std::span<const float> logits, int32_t target, std::span<double> log_probs) {
  RowScore s;
  const auto top = std::max_element(logits.begin(), logits.end());
  s.argmax = static_cast<int32_t>(top - logits.begin());
  const double max = *top;
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  s.nll = log_z - static_cast<double>(logits[static_cast<size_t>(target)]);
  if (!log_probs.empty())
    for (size_t i = 0; i < logits.size(); ++i) log_probs[i] = static_cast<double>(logits[i]) - log_z;
  return s;
}

double MeanStats::mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }

double MeanStats::standard_error() const {
  if (count < 2) return 0.0;
  const double m = mean();
  const double var = sum2 / static_cast<double>(count) - m * m;
  return var > 0 ? std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
}

double perplexity(const MeanStats& nll) { return std::exp(nll.mean()); }

double perplexity_uncertainty(const MeanStats& nll) { return perplexity(nll) * nll.standard_error(); }

}  // namespace llmk::eval
