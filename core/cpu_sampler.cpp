#include "core/cpu_sampler.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/token_bitmask.hpp"

namespace llmk {

CpuSampler::CpuSampler(int32_t vocab_size, int32_t max_threads) : sampler_(vocab_size, max_threads) {}

void CpuSampler::open(uint64_t request_key, const SamplingParams& params, uint64_t seed,
                      std::span<const int32_t> prompt_ids, int32_t num_samples) {
  if (num_samples < 1)
    throw Error(ErrorCode::invalid_argument, "CPU sampler: request " + std::to_string(request_key) + " opened with " +
                                                 std::to_string(num_samples) + " samples");
  RequestState state;
  state.params = params;
  state.seed = seed;
  state.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
  state.generated.resize(static_cast<size_t>(num_samples));
  if (!requests_.emplace(request_key, std::move(state)).second)
    throw Error(ErrorCode::invalid_argument, "CPU sampler: request " + std::to_string(request_key) + " opened twice");
}

void CpuSampler::release(uint64_t request_key) { requests_.erase(request_key); }

void CpuSampler::seed_history(uint64_t request_key, int32_t sample_index, std::span<const int32_t> ids) {
  auto it = requests_.find(request_key);
  if (it == requests_.end() || sample_index < 0 || static_cast<size_t>(sample_index) >= it->second.generated.size())
    throw Error(ErrorCode::internal, "CPU sampler: no sample " + std::to_string(sample_index) + " of request " +
                                         std::to_string(request_key));
  auto& history = it->second.generated[static_cast<size_t>(sample_index)];
  history.insert(history.end(), ids.begin(), ids.end());
}

void CpuSampler::sample(const LogitsView& view, std::span<const Row> rows, std::span<SampledToken> out,
                        const IdsEnqueued& enqueued) {
  if (view.device != Device::cpu)
    throw Error(ErrorCode::internal, std::string("CPU sampler: a view in ") + device_name(view.device) + " memory");
  if (!view.ready.is_ready_on_return()) throw Error(ErrorCode::internal, "CPU sampler: a view with a pending event");
  if (view.vocab_size != sampler_.vocab_size())
    throw Error(ErrorCode::internal, "CPU sampler: a view of vocabulary " + std::to_string(view.vocab_size) +
                                         " for a sampler of " + std::to_string(sampler_.vocab_size()));
  if (static_cast<size_t>(view.num_rows) < rows.size() || out.size() < rows.size())
    throw Error(ErrorCode::internal, "CPU sampler: " + std::to_string(rows.size()) + " rows for a view of " +
                                         std::to_string(view.num_rows) + " and " + std::to_string(out.size()) +
                                         " outputs");
  rows_.resize(rows.size());
  // Structured outputs: a masked copy of each row that has a token bitmask
  // (the view's logits are read only), taken before penalties and temperature.
  const auto vocab = static_cast<size_t>(view.vocab_size);
  const auto num_masked = static_cast<size_t>(
      std::count_if(rows.begin(), rows.end(), [](const Row& r) { return !r.token_bitmask.empty(); }));
  if (masked_logits_.size() < num_masked * vocab) masked_logits_.resize(num_masked * vocab);
  size_t next_masked = 0;
  scratch_histories_.clear();
  scratch_histories_.reserve(rows.size());  // spans below point into it: no reallocation
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    auto it = requests_.find(r.request_key);
    if (it == requests_.end())
      throw Error(ErrorCode::internal, "CPU sampler: no state for request " + std::to_string(r.request_key));
    RequestState& req = it->second;
    if (r.sample_index < 0 || static_cast<size_t>(r.sample_index) >= req.generated.size())
      throw Error(ErrorCode::internal, "CPU sampler: sample " + std::to_string(r.sample_index) + " of a request with " +
                                           std::to_string(req.generated.size()));
    std::span<const int32_t> history = req.generated[static_cast<size_t>(r.sample_index)];
    if (static_cast<size_t>(r.num_generated) != history.size()) {
      // A row whose token the caller counts but never delivered (the step
      // that was to feed it failed): drawn at its count, over the history
      // padded with id 0, as the fed-back row itself read.
      auto& padded = scratch_histories_.emplace_back(history.begin(), history.end());
      padded.resize(static_cast<size_t>(std::max(r.num_generated, 0)), 0);
      // A speculative row's history holds the drafts fed before it.
      for (size_t j = 1; j <= i && padded.size() >= history.size() + j; ++j) {
        const Row& before = rows[i - j];
        if (before.request_key != r.request_key || before.sample_index != r.sample_index || before.draft_token < 0)
          break;
        padded[padded.size() - j] = before.draft_token;
      }
      history = padded;
    }
    SamplerRow& row = rows_[i];
    row.logits = view.row(static_cast<int32_t>(i));
    if (!r.token_bitmask.empty()) {
      float* masked = masked_logits_.data() + vocab * next_masked++;
      apply_token_bitmask(row.logits, view.vocab_size, r.token_bitmask, masked);
      row.logits = masked;
    }
    row.params = &req.params;
    row.prompt_ids = req.prompt_ids;
    row.generated_ids = history;
    row.seed = req.seed;
    row.sample_index = static_cast<uint32_t>(r.sample_index);
    row.draft_token = r.draft_token;
    row.draft_probs = r.draft_probs;
  }
  sampler_.sample(rows_, out);
  ids_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ids_[i] = out[i].token_id;
    auto& history = requests_.at(rows[i].request_key).generated[static_cast<size_t>(rows[i].sample_index)];
    if (history.size() == static_cast<size_t>(rows[i].num_generated)) history.push_back(out[i].token_id);
  }
  if (enqueued) {
    SampledIds ids;
    ids.device = Device::cpu;
    ids.data = ids_.data();
    ids.count = static_cast<int32_t>(ids_.size());
    enqueued(ids);
  }
}

void CpuSampler::truncate_history(uint64_t request_key, int32_t sample_index, int32_t num_generated) {
  auto it = requests_.find(request_key);
  if (it == requests_.end() || sample_index < 0 || static_cast<size_t>(sample_index) >= it->second.generated.size())
    throw Error(ErrorCode::internal, "CPU sampler: truncate_history of an unknown sample " +
                                         std::to_string(sample_index) + " of request " + std::to_string(request_key));
  auto& history = it->second.generated[static_cast<size_t>(sample_index)];
  if (num_generated < 0 || static_cast<size_t>(num_generated) > history.size())
    throw Error(ErrorCode::internal, "CPU sampler: truncate_history to " + std::to_string(num_generated) +
                                         " ids of a history of " + std::to_string(history.size()));
  history.resize(static_cast<size_t>(num_generated));
}

std::unique_ptr<DeviceSampler> make_cpu_sampler(int32_t vocab_size) {
  // One thread: a second OpenMP team next to the executor's would spin
  // against it between steps (on 2 cores: 8000 tok/s with one team, under
  // 1000 with two).
  return std::make_unique<CpuSampler>(vocab_size, 1);
}

}  // namespace llmk
