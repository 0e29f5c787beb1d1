// The device penalty state's kernels (contract in sampling.hpp): a slot
// cleared and marked with the prompt's tokens, then counts that grow by the
// sampled ids and shrink by the ids a speculative step rolled back.
#include "cuda_compat.hpp"
#include "sampling.hpp"

namespace llmk::cuda {
namespace {

// Threads per block of the penalty kernels (their launches below).
constexpr int kPenaltyThreads = 256;
constexpr int kPenaltyAppendThreads = 128;

// counts: [vocab], prompt_mask: [words] of one slot.
__global__ void __launch_bounds__(kPenaltyThreads, 1) penalty_clear_kernel(int32_t* __restrict__ counts, uint32_t* __restrict__ prompt_mask, int32_t vocab,
                                     int64_t words) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vocab; i += stride) {
    counts[i] = 0;
    if (i < words) prompt_mask[i] = 0u;
  }
}

// prompt_mask: [words] of one slot; prompt_ids: [num_ids].
__global__ void __launch_bounds__(kPenaltyThreads, 1) penalty_mark_prompt_kernel(uint32_t* __restrict__ prompt_mask, const int32_t* __restrict__ prompt_ids,
                                           int32_t num_ids, int32_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_ids) return;
  const int32_t id = prompt_ids[i];
  if (id >= 0 && id < vocab) atomicOr(&prompt_mask[id >> 5], 1u << (id & 31));
}

// counts: [num_slots, vocab]; params, token_ids: [num_rows].
__global__ void __launch_bounds__(kPenaltyAppendThreads, 1) penalty_append_kernel(int32_t* __restrict__ counts, int32_t num_slots, int32_t vocab,
                                      const SamplingRowParams* __restrict__ params,
                                      const int32_t* __restrict__ token_ids, int32_t num_rows) {
  const int32_t row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= num_rows) return;
  const int32_t slot = params[row].penalty_slot, id = token_ids[row];
  if (slot < 0 || slot >= num_slots || id < 0 || id >= vocab) return;
  atomicAdd(&counts[static_cast<int64_t>(slot) * vocab + id], 1);
}

// counts: [num_slots, vocab]; slots, token_ids: [num_ids].
__global__ void __launch_bounds__(kPenaltyAppendThreads, 1) penalty_remove_kernel(int32_t* __restrict__ counts, int32_t num_slots, int32_t vocab,
                                      const int32_t* __restrict__ slots, const int32_t* __restrict__ token_ids,
                                      int32_t num_ids) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_ids) return;
  const int32_t slot = slots[i], id = token_ids[i];
  if (slot < 0 || slot >= num_slots || id < 0 || id >= vocab) return;
  atomicAdd(&counts[static_cast<int64_t>(slot) * vocab + id], -1);
}

}  // namespace

cudaError_t penalty_state_init(const PenaltyState& state, int32_t slot, const int32_t* prompt_ids,
                               int32_t num_prompt_ids, cudaStream_t stream) {
  if (slot < 0 || slot >= state.num_slots || state.vocab <= 0 || num_prompt_ids < 0 ||
      (num_prompt_ids > 0 && prompt_ids == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int64_t words = prompt_mask_words(state.vocab);
  int32_t* counts = state.counts + static_cast<int64_t>(slot) * state.vocab;
  uint32_t* prompt_mask = state.prompt_mask + slot * words;
  const int threads = kPenaltyThreads;
  const int blocks = static_cast<int>((state.vocab + threads - 1) / threads);
  LLMK_LAUNCH(blocks, threads, 0, stream, penalty_clear_kernel)(counts, prompt_mask, state.vocab, words);
  if (num_prompt_ids > 0) {
    LLMK_LAUNCH((num_prompt_ids + threads - 1) / threads, threads, 0, stream, penalty_mark_prompt_kernel)(
        prompt_mask, prompt_ids, num_prompt_ids, state.vocab);
  }
  return cudaPeekAtLastError();
}

cudaError_t penalty_state_append(const PenaltyState& state, const SamplingRowParams* params, const int32_t* token_ids,
                                 int32_t num_rows, cudaStream_t stream) {
  if (num_rows < 0 || state.vocab <= 0) return cudaErrorInvalidValue;
  if (num_rows == 0) return cudaSuccess;
  const int threads = kPenaltyAppendThreads;
  LLMK_LAUNCH((num_rows + threads - 1) / threads, threads, 0, stream, penalty_append_kernel)(
      state.counts, state.num_slots, state.vocab, params, token_ids, num_rows);
  return cudaPeekAtLastError();
}

cudaError_t penalty_state_remove(const PenaltyState& state, const int32_t* slots, const int32_t* token_ids,
                                 int32_t num_ids, cudaStream_t stream) {
  if (num_ids < 0 || state.vocab <= 0 || (num_ids > 0 && (slots == nullptr || token_ids == nullptr)))
    return cudaErrorInvalidValue;
  if (num_ids == 0) return cudaSuccess;
  const int threads = kPenaltyAppendThreads;
  LLMK_LAUNCH((num_ids + threads - 1) / threads, threads, 0, stream, penalty_remove_kernel)(
      state.counts, state.num_slots, state.vocab, slots, token_ids, num_ids);
  return cudaPeekAtLastError();
}

}  // namespace llmk::cuda
