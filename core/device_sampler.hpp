// Sampling where the logits live, for devices other than the host.
//
// Every device's sampler is one: the CPU's (core/cpu_sampler.hpp) runs
// core/sampler.hpp's Sampler over host rows; a device executor's LogitsView
// points into device memory, and its DeviceSampler samples there, on the
// device, and brings back only the token ids and any logprobs asked for. It keeps each request's sampling
// state (parameters, seed, the penalty history) on its side, updated by
// deltas: open when a request starts, one appended id per sampled row,
// release when it ends. The semantics are the CPU Sampler's, token for token
// for the same seed (kernels/cuda/sampling.hpp for CUDA).
//
// Samplers are made through the device registry (core/device_registry.hpp),
// like executors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/executor.hpp"
#include "core/request.hpp"
#include "core/sampler.hpp"

namespace llmk {

class DeviceSampler {
 public:
  virtual ~DeviceSampler() = default;

  // A request's state: `num_samples` samples sharing params and seed; the
  // prompt's ids (for the repetition penalty; may be empty when it is off).
  // Throws Error(invalid_argument) for a key already open.
  virtual void open(uint64_t request_key, const SamplingParams& params, uint64_t seed,
                    std::span<const int32_t> prompt_ids, int32_t num_samples) = 0;
  virtual void release(uint64_t request_key) = 0;
  // Ids a sample generated before this sampler saw it (a request handed off
  // with its first token, or a sampler made after requests began): appended
  // to its history, as if sampled here. Throws Error for an unknown request
  // or sample, or (unsupported) where the sampler cannot take them.
  virtual void seed_history(uint64_t request_key, int32_t sample_index, std::span<const int32_t> ids) = 0;

  struct Row {
    uint64_t request_key = 0;
    int32_t sample_index = 0;
    int32_t num_generated = 0;  // the sample's tokens so far: its draw counter
    // Speculative: the draft this row verifies (SamplerRow::draft_token);
    // the sample's rows just before it in `rows` carry the drafts fed
    // before it, which its history (penalties) includes. -1: none.
    int32_t draft_token = -1;
    // The distribution the draft was drawn from (SamplerRow::draft_probs),
    // valid during sample(); empty: proposed with certainty. The CPU and
    // CUDA samplers both apply it.
    std::span<const TokenProb> draft_probs = {};
    // Structured outputs: the tokens this row may take (core/grammar.hpp's
    // bitmask layout; ids past its bits are not allowed), valid during
    // sample(); empty: every token. Applied to the logits before
    // penalties, temperature and truncation. The CPU and CUDA samplers both
    // apply it.
    std::span<const uint32_t> token_bitmask = {};
  };
  // Samples view row i for rows[i] (out.size() >= rows.size()) and appends
  // each sampled id to its sample's history. Waits for view.ready first (on
  // the device), and for its own results before returning. Once the ids are
  // enqueued, and before that wait, calls `enqueued` (when set) with where
  // they will be on the device: the executor's next step may read them in
  // order, from then until the next sample() call. Throws Error for a row of
  // an unknown request or a view of another device.
  using IdsEnqueued = std::function<void(const SampledIds&)>;
  virtual void sample(const LogitsView& view, std::span<const Row> rows, std::span<SampledToken> out,
                      const IdsEnqueued& enqueued) = 0;
  void sample(const LogitsView& view, std::span<const Row> rows, std::span<SampledToken> out) {
    sample(view, rows, out, IdsEnqueued{});
  }
  // Drops a sample's ids past its first num_generated: rows of a
  // speculative step after a rejected draft (core/speculation.hpp), which
  // sample() appended like any other. Throws Error where the device's
  // sampler cannot (the default: such a device does not speculate).
  virtual void truncate_history(uint64_t request_key, int32_t sample_index, int32_t num_generated);
};

// The registered sampler of `device` (core/device_registry.hpp). Throws
// Error(internal) naming the device when none is registered.
std::unique_ptr<DeviceSampler> make_device_sampler(Device device, int32_t vocab_size);

}  // namespace llmk
