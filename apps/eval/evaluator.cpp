#include "apps/eval/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/executor.hpp"

namespace llmk::eval {
namespace {

constexpr int32_t kRowsPerCopy = 32;  // host logits held at once: rows * vocab floats

// Positions [begin, end) of one chunk at KV slots [0, ctx): the slot of
// position p is p; block b of the table starts at slot b * block_size.
StepBatch chunk_step(const std::vector<int32_t>& ids, int32_t begin, int32_t end, const ChunkPlan& plan,
                     int32_t block_size) {
  StepBatch b;
  b.token_ids.assign(ids.begin() + begin, ids.begin() + end);
  for (int32_t p = begin; p < end; ++p) {
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);
    if (p >= plan.first_scored && p < plan.ctx - 1) b.logits_rows.push_back(p - begin);
  }
  b.query_start = {0, end - begin};
  b.context_lens = {end};
  b.block_size = block_size;
  b.max_blocks_per_seq = (plan.ctx + block_size - 1) / block_size;
  for (int32_t k = 0; k < b.max_blocks_per_seq; ++k) b.block_tables.push_back(k * block_size);
  return b;
}

// KL(base || this) of one row. The base's stored log-probabilities are
// renormalized first: rounded to f16 they no longer sum to one, and without
// this a run compared with its own saved logits would show a first-order
// rounding term instead of zero.
double kl_row(std::span<const float> base_log_probs, std::span<const double> log_probs) {
  const double max = *std::max_element(base_log_probs.begin(), base_log_probs.end());
  double z = 0;
  for (float lb : base_log_probs) z += std::exp(static_cast<double>(lb) - max);
  const double log_z = max + std::log(z);
  double sum = 0;
  for (size_t i = 0; i < log_probs.size(); ++i) {
    const double lb = static_cast<double>(base_log_probs[i]) - log_z;
    sum += std::exp(lb) * (lb - log_probs[i]);
  }
  return sum;
}

}  // namespace

double EvalResult::kl_median() const {
  if (kl_values.empty()) return 0;
  std::vector<float> v = kl_values;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const float upper = v[mid];
  const float lower = *std::max_element(v.begin(), v.begin() + static_cast<int64_t>(mid));
  return 0.5 * (static_cast<double>(lower) + upper);
}

double EvalResult::kl_max() const {
  return kl_values.empty() ? 0.0 : *std::max_element(kl_values.begin(), kl_values.end());
}

double EvalResult::top1_agreement() const {
  return kl.count > 0 ? static_cast<double>(same_top) / static_cast<double>(kl.count) : 0.0;
}

EvalResult evaluate(Executor& executor, const EvalRun& run) {
  const ChunkPlan& plan = run.plan;
  const ModelRuntime& rt = executor.runtime();
  if (static_cast<int64_t>(rt.max_seq_len) < plan.ctx)
    throw Error(ErrorCode::invalid_argument, "eval: --ctx " + std::to_string(plan.ctx) +
                                                 " is beyond the model's context limit of " +
                                                 std::to_string(rt.max_seq_len));
  const int32_t slots_needed = (plan.ctx + run.block_size - 1) / run.block_size * run.block_size;
  if (rt.num_kv_slots < static_cast<uint64_t>(slots_needed))
    throw Error(ErrorCode::invalid_argument, "eval: the KV memory has " + std::to_string(rt.num_kv_slots) +
                                                 " slots; a context of " + std::to_string(plan.ctx) + " needs " +
                                                 std::to_string(slots_needed));
  const int32_t batch = std::min<int32_t>(run.batch, static_cast<int32_t>(rt.max_step_tokens));
  if (batch < 1) throw Error(ErrorCode::invalid_argument, "eval: --batch " + std::to_string(run.batch));
  const int32_t vocab = executor.model_config().vocab_size;

  EvalResult result;
  result.plan = plan;
  result.has_base = run.base != nullptr;
  std::vector<float> logits(static_cast<size_t>(kRowsPerCopy) * vocab);
  std::vector<double> log_probs(static_cast<size_t>(vocab));
  const bool need_log_probs = run.save != nullptr || run.base != nullptr;
  LogitsReader::Row base_row;
  const auto t0 = std::chrono::steady_clock::now();

  for (int32_t c = 0; c < plan.num_chunks; ++c) {
    const std::vector<int32_t> ids = chunk_input(run.tokens, plan, c);
    const int32_t* targets = run.tokens.data() + static_cast<int64_t>(c) * plan.ctx;
    for (int32_t begin = 0; begin < plan.ctx; begin += batch) {
      const int32_t end = std::min(plan.ctx, begin + batch);
      const StepBatch step = chunk_step(ids, begin, end, plan, run.block_size);
      const LogitsView view = executor.execute(step);
      for (int32_t r0 = 0; r0 < step.num_logits(); r0 += kRowsPerCopy) {
        const int32_t n = std::min(kRowsPerCopy, step.num_logits() - r0);
        executor.copy_logits_to_host(view, r0, n, logits.data());
        for (int32_t r = 0; r < n; ++r) {
          const int32_t pos = begin + step.logits_rows[static_cast<size_t>(r0 + r)];
          const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab));
          const RowScore s =
              score_row(row, targets[pos + 1], need_log_probs ? std::span<double>(log_probs) : std::span<double>());
          result.nll.add(s.nll);
          if (run.save != nullptr) run.save->write_row(s.argmax, s.nll, log_probs);
          if (run.base != nullptr) {
            run.base->read_row(base_row);
            const double kl = kl_row(base_row.log_probs, log_probs);
            result.kl.add(kl);
            result.kl_values.push_back(static_cast<float>(kl));
            result.base_nll.add(base_row.nll);
            if (base_row.argmax == s.argmax) ++result.same_top;
          }
        }
      }
    }
    result.chunks_done = c + 1;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run.on_chunk) run.on_chunk(result);
  }
  if (run.save != nullptr) run.save->finish();
  return result;
}

}  // namespace llmk::eval
