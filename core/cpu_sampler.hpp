// The CPU's DeviceSampler: core/sampler.hpp's Sampler over host logits rows,
// behind the same seam as every other device's sampler, keeping each
// request's sampling state (parameters, seed, prompt, each sample's ids) on
// its side and updated by deltas as a device keeps it in device memory.
#pragma once

#include <unordered_map>
#include <vector>

#include "core/device_sampler.hpp"

namespace llmk {

class CpuSampler final : public DeviceSampler {
 public:
  // max_threads as Sampler's: 1 samples on the calling thread only.
  explicit CpuSampler(int32_t vocab_size, int32_t max_threads = 1);

  void open(uint64_t request_key, const SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt_ids,
            int32_t num_samples) override;
  void release(uint64_t request_key) override;
  void seed_history(uint64_t request_key, int32_t sample_index, std::span<const int32_t> ids) override;
  // The ids are host memory, enqueued (and ready) once every row is sampled:
  // `enqueued` runs after the last read of the view.
  void sample(const LogitsView& view, std::span<const Row> rows, std::span<SampledToken> out,
              const IdsEnqueued& enqueued) override;
  using DeviceSampler::sample;
  void truncate_history(uint64_t request_key, int32_t sample_index, int32_t num_generated) override;

 private:
  struct RequestState {
    SamplingParams params;
    uint64_t seed = 0;
    std::vector<int32_t> prompt_ids;
    std::vector<std::vector<int32_t>> generated;  // [num_samples]
  };

  Sampler sampler_;
  std::unordered_map<uint64_t, RequestState> requests_;
  // Per step, reused: the rows handed to the Sampler, histories padded for
  // rows whose count runs ahead of the history (see sample()), the ids.
  std::vector<SamplerRow> rows_;
  std::vector<std::vector<int32_t>> scratch_histories_;
  std::vector<int32_t> ids_;
  std::vector<float> masked_logits_;  // [rows with a token bitmask][vocab_size]
};

std::unique_ptr<DeviceSampler> make_cpu_sampler(int32_t vocab_size);

}  // namespace llmk
