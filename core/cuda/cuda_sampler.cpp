// The CUDA DeviceSampler (core/device_sampler.hpp) over the kernels of
// kernels/cuda/sampling.hpp.
//
// Per step: the rows' parameters go up in one copy (pinned staging), the
// sampling kernel runs on this sampler's stream after the executor's logits
// event, the penalty counts take the new ids on the device, and only the
// ids (plus the logprob records when a row asked for them) come back.
//
// Penalty state (the prompt's tokens as a bit mask, the generated tokens as
// counts: about 4.1 bytes per vocabulary entry) exists only for samples of
// requests with a penalty; other rows read no history. Slots come from a
// pool that doubles when full (a copy of the live slots, between steps).
//
// Speculative steps (DeviceSampler::Row::draft_token): a row verifies its
// draft on the device (kernels/cuda/sampling.hpp) and reads the drafts of
// its sample's rows before it as history. Every row's id goes into the
// counts; the ids past a sample's first rejected draft are taken back by
// truncate_history: the host keeps each penalised sample's ids of the last
// step (a few ints), and the counts drop them at the start of the next
// sample() (one small upload and launch, none without a rejection).
//
// Structured outputs (DeviceSampler::Row::token_bitmask): the masks of the
// rows that have one go up in one more copy, a row of words each, and the
// kernel reads a left-out token's logit as -inf.
//
// Drafts drawn from a distribution (DeviceSampler::Row::draft_probs,
// speculative.draft_sampling sampled): each draft's q goes up sparse, as
// its (id, prob) pairs, and is spread into a dense [drafts, vocab] array
// that the sampling kernel reads (the full-q rule, kernels/cuda/sampling.hpp)
// and that is cleared again after it, so it stays zero between steps.
#include "core/cuda/cuda_sampler.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda/device_memory.hpp"
#include "core/error.hpp"
#include "kernels/cuda/sampling.hpp"

namespace llmk {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) cuda_failed("CUDA sampler", status, what);
}

// Scratch that grows, keeping nothing (contents are rewritten every step).
template <class T, cuda::MemoryKind kind>
T* scratch(cuda::Buffer<kind>& buffer, size_t bytes, const char* what) {
  check(buffer.reserve(bytes), what);
  return buffer.template as<T>();
}

bool has_penalty(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

class CudaSampler final : public DeviceSampler {
 public:
  explicit CudaSampler(int32_t vocab_size) : vocab_(vocab_size) {
    if (vocab_size <= 0) throw Error(ErrorCode::invalid_argument, "CUDA sampler: vocab_size must be positive");
    penalties_.vocab = vocab_;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the stream");
    if (const cudaError_t status = cudaEventCreateWithFlags(&ids_ready_, cudaEventDisableTiming);
        status != cudaSuccess) {
      cudaStreamDestroy(stream_);
      check(status, "creating an event");
    }
  }

  ~CudaSampler() override {
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(ids_ready_);
    cudaStreamDestroy(stream_);
  }

  using DeviceSampler::sample;

  void open(uint64_t key, const SamplingParams& params, uint64_t seed, std::span<const int32_t> prompt_ids,
            int32_t num_samples) override {
    if (requests_.count(key) != 0)
      throw Error(ErrorCode::invalid_argument, "CUDA sampler: request " + std::to_string(key) + " opened twice");
    Request r;
    r.params = params;
    r.seed = seed;
    r.log_min_p = params.min_p > 0.0f ? std::log(params.min_p) : 0.0f;
    r.slots.assign(static_cast<size_t>(std::max(1, num_samples)), -1);
    r.num_ids.assign(r.slots.size(), 0);
    r.last_first.assign(r.slots.size(), 0);
    r.last_ids.resize(r.slots.size());
    if (has_penalty(params)) {
      // One upload of the prompt; every sample's slot starts from it.
      const size_t n = prompt_ids.size();
      auto* d_prompt = scratch<int32_t>(prompt_scratch_, std::max<size_t>(1, n) * sizeof(int32_t), "the prompt's ids");
      if (n != 0)
        check(cudaMemcpyAsync(d_prompt, prompt_ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
              "uploading the prompt's ids");
      for (int32_t& slot : r.slots) {
        slot = take_slot();
        check(cuda::penalty_state_init(penalties_, slot, d_prompt, static_cast<int32_t>(n), stream_),
              "initialising a penalty slot");
      }
      // The prompt buffer is reused by the next open: finish with it now.
      check(cudaStreamSynchronize(stream_), "initialising penalty slots");
    }
    requests_.emplace(key, std::move(r));
  }

  // Without a penalty nothing reads a history; with one, the device counts
  // would need the ids (not supported: the request is refused, not wrong).
  void seed_history(uint64_t key, int32_t sample_index, std::span<const int32_t> ids) override {
    const auto it = requests_.find(key);
    if (it == requests_.end() || sample_index < 0 || static_cast<size_t>(sample_index) >= it->second.slots.size())
      throw Error(ErrorCode::internal, "CUDA sampler: no sample " + std::to_string(sample_index) + " of request " +
                                           std::to_string(key));
    if (!ids.empty() && has_penalty(it->second.params))
      throw Error(ErrorCode::unsupported, "CUDA sampler: a request that arrives with generated tokens (a prefill "
                                          "handoff) cannot use repetition, presence or frequency penalties");
    it->second.num_ids[static_cast<size_t>(sample_index)] += static_cast<int32_t>(ids.size());
  }

  void release(uint64_t key) override {
    const auto it = requests_.find(key);
    if (it == requests_.end()) return;
    for (int32_t slot : it->second.slots) {
      if (slot < 0) continue;
      free_slots_.push_back(slot);
      // The slot is cleared when it is taken again: nothing to take back.
      for (size_t i = 0; i < removal_slots_.size();) {
        if (removal_slots_[i] != slot) {
          ++i;
          continue;
        }
        removal_slots_[i] = removal_slots_.back();
        removal_ids_[i] = removal_ids_.back();
        removal_slots_.pop_back();
        removal_ids_.pop_back();
      }
    }
    requests_.erase(it);
  }

  // Ids past num_generated are the last step's (a speculative step's rows
  // after its first rejected draft): their counts are taken back before the
  // next step samples.
  void truncate_history(uint64_t key, int32_t sample_index, int32_t num_generated) override {
    const auto it = requests_.find(key);
    if (it == requests_.end() || sample_index < 0 || static_cast<size_t>(sample_index) >= it->second.slots.size())
      throw Error(ErrorCode::internal, "CUDA sampler: truncate_history of an unknown sample " +
                                           std::to_string(sample_index) + " of request " + std::to_string(key));
    Request& r = it->second;
    const auto sample = static_cast<size_t>(sample_index);
    // A penalised sample drops only what its counts can give back: the last step's ids.
    const int32_t first = r.slots[sample] < 0           ? 0
                          : r.last_ids[sample].empty() ? r.num_ids[sample]
                                                       : r.last_first[sample];
    if (num_generated < first || num_generated > r.num_ids[sample])
      throw Error(ErrorCode::internal, "CUDA sampler: truncate_history to " + std::to_string(num_generated) +
                                           " ids of a history of " + std::to_string(r.num_ids[sample]) +
                                           (r.slots[sample] >= 0 ? " (the last step's from " + std::to_string(first) + ")"
                                                                 : std::string()));
    r.num_ids[sample] = num_generated;
    if (r.slots[sample] < 0) return;
    std::vector<int32_t>& last = r.last_ids[sample];
    const auto keep = static_cast<size_t>(num_generated - first);
    for (size_t i = keep; i < last.size(); ++i) {
      removal_slots_.push_back(r.slots[sample]);
      removal_ids_.push_back(last[i]);
    }
    last.resize(std::min(keep, last.size()));
  }

  void sample(const LogitsView& view, std::span<const Row> rows, std::span<SampledToken> out,
              const IdsEnqueued& enqueued) override {
    if (view.device != Device::cuda)
      throw Error(ErrorCode::internal, std::string("CUDA sampler: a view of device '") + device_name(view.device) + "'");
    if (view.vocab_size != vocab_)
      throw Error(ErrorCode::internal, "CUDA sampler: a view of vocabulary " + std::to_string(view.vocab_size) +
                                           ", the sampler's is " + std::to_string(vocab_));
    const auto num_rows = static_cast<int32_t>(rows.size());
    if (num_rows == 0) return;
    if (view.num_rows != num_rows || out.size() < rows.size())
      throw Error(ErrorCode::internal, "CUDA sampler: " + std::to_string(view.num_rows) + " logits rows for " +
                                           std::to_string(num_rows) + " sample rows");

    // Host staging: [num_rows] params, then [num_rows] ids and logprob records coming back.
    const size_t params_bytes = rows.size() * sizeof(cuda::SamplingRowParams);
    bool any_logprobs = false;
    int32_t num_q_rows = 0;  // rows verifying a draft drawn from q
    int32_t num_mask_rows = 0;  // rows with a structured output's token mask
    const int64_t words = cuda::prompt_mask_words(vocab_);
    q_entries_.clear();
    auto* host_params = scratch<cuda::SamplingRowParams>(params_host_, params_bytes, "allocating pinned memory");
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto it = requests_.find(rows[i].request_key);
      if (it == requests_.end())
        throw Error(ErrorCode::internal, "CUDA sampler: no state for request " + std::to_string(rows[i].request_key));
      const Request& r = it->second;
      if (rows[i].sample_index < 0 || static_cast<size_t>(rows[i].sample_index) >= r.slots.size())
        throw Error(ErrorCode::internal, "CUDA sampler: sample " + std::to_string(rows[i].sample_index) +
                                             " of a request with " + std::to_string(r.slots.size()));
      cuda::SamplingRowParams& p = host_params[i];
      p = cuda::SamplingRowParams{};
      p.temperature = r.params.temperature;
      p.top_k = r.params.top_k;
      p.top_p = r.params.top_p;
      p.min_p = r.params.min_p;
      p.log_min_p = r.log_min_p;
      p.repetition_penalty = r.params.repetition_penalty;
      p.frequency_penalty = r.params.frequency_penalty;
      p.presence_penalty = r.params.presence_penalty;
      p.seed = r.seed;
      p.step = static_cast<uint64_t>(rows[i].num_generated);
      p.sample_index = static_cast<uint32_t>(rows[i].sample_index);
      p.num_logprobs = r.params.logprobs;
      p.penalty_slot = r.slots[static_cast<size_t>(rows[i].sample_index)];
      p.draft_token = rows[i].draft_token;
      if (!rows[i].draft_probs.empty()) {
        p.draft_q_row = num_q_rows++;
        for (const TokenProb& t : rows[i].draft_probs) q_entries_.push_back({p.draft_q_row, t.id, t.prob});
      }
      if (!rows[i].token_bitmask.empty()) {
        if (static_cast<int64_t>(rows[i].token_bitmask.size()) != words)
          throw Error(ErrorCode::internal, "CUDA sampler: a token mask of " +
                                               std::to_string(rows[i].token_bitmask.size()) + " words for a vocabulary of " +
                                               std::to_string(vocab_));
        p.mask_row = num_mask_rows++;
      }
      any_logprobs = any_logprobs || r.params.logprobs >= 0;
    }
    auto* d_params = scratch<cuda::SamplingRowParams>(params_device_, params_bytes, "the rows' parameters");
    const size_t logprob_bytes =
        any_logprobs ? rows.size() * cuda::kSamplingLogprobsPerRow * sizeof(cuda::SampledLogprob) : 0;
    auto* d_tokens = scratch<int32_t>(tokens_device_, rows.size() * sizeof(int32_t), "the sampled ids");
    auto* d_logprobs = any_logprobs
                           ? scratch<cuda::SampledLogprob>(logprobs_device_, logprob_bytes, "the logprob records")
                           : nullptr;
    auto* workspace =
        scratch<float>(workspace_, cuda::sampling_workspace_bytes(num_rows, vocab_), "the sampling workspace");

    check(cudaMemcpyAsync(d_params, host_params, params_bytes, cudaMemcpyHostToDevice, stream_),
          "uploading the rows' parameters");
    remove_rolled_back();
    if (view.ready.event != nullptr)
      check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(view.ready.event), 0), "waiting for the logits");
    const float* draft_q = num_q_rows > 0 ? spread_draft_probs(num_q_rows) : nullptr;
    const uint32_t* token_masks = num_mask_rows > 0 ? upload_masks(rows, num_mask_rows) : nullptr;
    check(cuda::sample_rows(view.data, view.row_stride, num_rows, vocab_, d_params, penalties_, workspace, d_tokens,
                            d_logprobs, stream_, draft_q, token_masks),
          "sampling");
    if (draft_q != nullptr)
      check(cuda::scatter_draft_probs(draft_q_.f32(), vocab_, q_entries_device_.as<cuda::DraftProbEntry>(),
                                      static_cast<int32_t>(q_entries_.size()), true, stream_),
            "clearing the drafts' q");
    // Histories exist only once a request with a penalty opened a slot.
    if (penalties_.num_slots > 0)
      check(cuda::penalty_state_append(penalties_, d_params, d_tokens, num_rows, stream_), "recording the ids");
    if (enqueued) {
      // The executor's next step may gather these ids on its own stream once
      // the event completes. They stay in d_tokens until the next sample()
      // (which may grow the buffer: cudaFree waits for the device first).
      check(cudaEventRecord(ids_ready_, stream_), "recording the ids event");
      SampledIds ids;
      ids.device = Device::cuda;
      ids.data = d_tokens;
      ids.count = num_rows;
      ids.ready_event = ids_ready_;
      enqueued(ids);
    }

    auto* host_back = scratch<unsigned char>(back_host_, rows.size() * sizeof(int32_t) + logprob_bytes,
                                           "allocating pinned memory");
    check(cudaMemcpyAsync(host_back, d_tokens, rows.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
          "copying the ids back");
    if (any_logprobs)
      check(cudaMemcpyAsync(host_back + rows.size() * sizeof(int32_t), d_logprobs, logprob_bytes,
                            cudaMemcpyDeviceToHost, stream_),
            "copying the logprobs back");
    check(cudaStreamSynchronize(stream_), "sampling");

    const auto* ids = reinterpret_cast<const int32_t*>(host_back);
    const auto* records = reinterpret_cast<const cuda::SampledLogprob*>(host_back + rows.size() * sizeof(int32_t));
    for (auto& [key, r] : requests_)
      for (std::vector<int32_t>& last : r.last_ids) last.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      Request& r = requests_.at(rows[i].request_key);
      const auto sample = static_cast<size_t>(rows[i].sample_index);
      r.num_ids[sample] = rows[i].num_generated + 1;
      if (r.slots[sample] >= 0) {
        if (r.last_ids[sample].empty()) r.last_first[sample] = rows[i].num_generated;
        r.last_ids[sample].push_back(ids[i]);
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      SampledToken& t = out[i];
      t.token_id = ids[i];
      const int32_t wanted = host_params[i].num_logprobs;
      t.has_logprobs = wanted >= 0;
      t.logprobs.top.clear();
      if (!t.has_logprobs) continue;
      const cuda::SampledLogprob* rec = records + i * cuda::kSamplingLogprobsPerRow;
      t.logprobs.token_id = rec[0].token_id;
      t.logprobs.logprob = rec[0].logprob;
      for (int32_t j = 1; j <= wanted && j < cuda::kSamplingLogprobsPerRow; ++j)
        if (rec[j].token_id >= 0) t.logprobs.top.emplace_back(rec[j].token_id, rec[j].logprob);
    }
  }

 private:
  struct Request {
    SamplingParams params;
    uint64_t seed = 0;
    float log_min_p = 0.0f;      // log(min_p) in float, as the CPU's threshold
    std::vector<int32_t> slots;  // per sample: its penalty slot, -1 without penalties
    // Per sample: the ids its history holds, and for a penalised sample the
    // ids the last sample() appended (truncate_history's), from index last_first.
    std::vector<int32_t> num_ids, last_first;
    std::vector<std::vector<int32_t>> last_ids;
  };

  // The step's q entries (q_entries_) up and into the dense rows, which
  // grow (cleared once) to hold num_q_rows; returns them.
  float* spread_draft_probs(int32_t num_q_rows) {
    const size_t dense_bytes = static_cast<size_t>(num_q_rows) * static_cast<size_t>(vocab_) * sizeof(float);
    if (dense_bytes > draft_q_.bytes()) {
      check(draft_q_.reserve(dense_bytes), "the drafts' q");
      check(cudaMemsetAsync(draft_q_.data(), 0, draft_q_.bytes(), stream_), "clearing the drafts' q");
    }
    const size_t bytes = q_entries_.size() * sizeof(cuda::DraftProbEntry);
    auto* host = scratch<cuda::DraftProbEntry>(q_entries_host_, bytes, "allocating pinned memory");
    std::memcpy(host, q_entries_.data(), bytes);
    auto* device = scratch<cuda::DraftProbEntry>(q_entries_device_, bytes, "the drafts' q");
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "uploading the drafts' q");
    check(cuda::scatter_draft_probs(draft_q_.f32(), vocab_, device, static_cast<int32_t>(q_entries_.size()), false,
                                    stream_),
          "spreading the drafts' q");
    return draft_q_.f32();
  }

  // The rows' token masks (the rows with one, in order: their mask_row) up
  // into one device array [num_mask_rows, words]; returns it.
  const uint32_t* upload_masks(std::span<const Row> rows, int32_t num_mask_rows) {
    const auto words = static_cast<size_t>(cuda::prompt_mask_words(vocab_));
    const size_t bytes = static_cast<size_t>(num_mask_rows) * words * sizeof(uint32_t);
    auto* host = scratch<uint32_t>(masks_host_, bytes, "allocating pinned memory");
    size_t next = 0;
    for (const Row& r : rows) {
      if (r.token_bitmask.empty()) continue;
      std::memcpy(host + next * words, r.token_bitmask.data(), words * sizeof(uint32_t));
      ++next;
    }
    auto* device = scratch<uint32_t>(masks_device_, bytes, "the rows' token masks");
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "uploading the rows' token masks");
    return device;
  }

  // Enqueues the pending take-backs of truncate_history on the stream.
  void remove_rolled_back() {
    if (removal_ids_.empty()) return;
    const auto n = removal_ids_.size();
    auto* host = scratch<int32_t>(removal_host_, 2 * n * sizeof(int32_t), "allocating pinned memory");
    std::memcpy(host, removal_slots_.data(), n * sizeof(int32_t));
    std::memcpy(host + n, removal_ids_.data(), n * sizeof(int32_t));
    auto* device = scratch<int32_t>(removal_device_, 2 * n * sizeof(int32_t), "the rolled-back ids");
    check(cudaMemcpyAsync(device, host, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "uploading the rolled-back ids");
    check(cuda::penalty_state_remove(penalties_, device, device + n, static_cast<int32_t>(n), stream_),
          "taking back rolled-back ids");
    removal_slots_.clear();
    removal_ids_.clear();
  }

  int32_t take_slot() {
    if (free_slots_.empty()) grow_penalties();
    const int32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }

  // Doubles the pool (at least 16 slots), copying the live slots over.
  void grow_penalties() {
    const int32_t old_slots = penalties_.num_slots, new_slots = std::max(16, 2 * old_slots);
    const int64_t words = cuda::prompt_mask_words(vocab_);
    cuda::DeviceBuffer counts, prompt_mask;
    check(counts.allocate(static_cast<size_t>(new_slots) * vocab_ * sizeof(int32_t)), "allocating penalty state");
    check(prompt_mask.allocate(static_cast<size_t>(new_slots) * words * 4), "allocating penalty state");
    if (old_slots > 0) {
      check(cudaMemcpyAsync(counts.data(), penalties_.counts, static_cast<size_t>(old_slots) * vocab_ * sizeof(int32_t),
                            cudaMemcpyDeviceToDevice, stream_),
            "moving penalty state");
      check(cudaMemcpyAsync(prompt_mask.data(), penalties_.prompt_mask, static_cast<size_t>(old_slots) * words * 4,
                            cudaMemcpyDeviceToDevice, stream_),
            "moving penalty state");
      check(cudaStreamSynchronize(stream_), "moving penalty state");
    }
    penalty_counts_ = std::move(counts);  // the old state goes with the swapped buffers
    penalty_mask_ = std::move(prompt_mask);
    penalties_ = cuda::PenaltyState{penalty_counts_.as<int32_t>(), penalty_mask_.as<uint32_t>(), new_slots, vocab_};
    for (int32_t s = new_slots - 1; s >= old_slots; --s) free_slots_.push_back(s);
  }

  int32_t vocab_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ids_ready_ = nullptr;  // the last step's ids are in tokens_device_
  cuda::DeviceBuffer penalty_counts_;  // [num_slots, vocab] int32
  cuda::DeviceBuffer penalty_mask_;    // [num_slots, prompt_mask_words(vocab)] uint32
  cuda::PenaltyState penalties_{nullptr, nullptr, 0, 0};  // over the two buffers
  std::vector<int32_t> free_slots_;
  std::unordered_map<uint64_t, Request> requests_;
  std::vector<int32_t> removal_slots_, removal_ids_;  // truncate_history's take-backs, not yet enqueued
  cuda::PinnedBuffer params_host_, back_host_, removal_host_, q_entries_host_, masks_host_;
  cuda::DeviceBuffer masks_device_;  // [rows with a mask, prompt_mask_words(vocab)] uint32
  cuda::DeviceBuffer params_device_, tokens_device_, logprobs_device_, workspace_, prompt_scratch_, removal_device_;
  std::vector<cuda::DraftProbEntry> q_entries_;  // this step's drafts' q, sparse
  cuda::DeviceBuffer q_entries_device_;
  cuda::DeviceBuffer draft_q_;  // [drafts, vocab] f32, zero between steps
};

}  // namespace

std::unique_ptr<DeviceSampler> make_cuda_sampler(int32_t vocab_size) {
  return std::make_unique<CudaSampler>(vocab_size);
}

}  // namespace llmk
