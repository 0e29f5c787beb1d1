// Token sampling on the device: one block per logits row, only token ids and
// a compact logprobs record come back to the host.
//
// The steps, their order and their meaning are those of the CPU engine's
// llmk::Sampler (core/sampler.hpp), so a seeded request samples the same
// tokens on either device:
//   1. repetition penalty over the distinct prompt + generated tokens,
//   2. frequency and presence penalties over the generated counts,
//   3. temperature (T < kSamplingGreedyTemperature: greedy argmax, ties to
//      the lowest id, and steps 4-6 are skipped),
//   4. top-k, 5. top-p over the renormalised top-k set, 6. min-p,
//   7. one draw with u = sampling_uniform(seed, sample_index, step).
// A truncated set (steps 4-6) is drawn from best first (logit descending,
// ties lowest id first), the whole vocabulary in id order: the CPU's order.
// No step sorts the vocabulary: sets are best-first prefixes found by a
// radix select over the logits' order-preserving bit patterns (see
// docs/cuda_sampling.md).
//
// Penalty state lives on the device, one slot per sample: the prompt's
// tokens as a bit mask and the generated tokens as counts. A slot is filled
// once from the prompt (penalty_state_init) and then grows by one token per
// sampled row (penalty_state_append), never re-sent whole; a speculative
// step's rejected rows are taken back (penalty_state_remove).
#pragma once

#include <cstddef>
#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_runtime.h>

namespace llmk::cuda {

// Mirrors of core/sampler.hpp's constants (this header does not depend on
// core/; a test checks they are equal).
constexpr float kSamplingGreedyTemperature = 1e-5f;
constexpr int32_t kSamplingMaxLogprobs = 20;
constexpr int32_t kSamplingMaxDraftsBefore = 64;  // sampling_limits::max_speculative_tokens

// One row's parameters, in device memory ([num_rows] array). Valid values
// as core's validate_sampling_params accepts them.
struct SamplingRowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;          // <= 0 or >= vocab: off
  float top_p = 1.0f;         // 1: off
  float min_p = 0.0f;         // 0: off
  float log_min_p = 0.0f;     // std::log(min_p) in float, computed on the host like the CPU's threshold
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;          // the request's resolved seed
  uint64_t step = 0;          // tokens this sample generated so far
  uint32_t sample_index = 0;  // 0..n-1
  int32_t num_logprobs = -1;  // -1: none; 0: the chosen token's only; up to kSamplingMaxLogprobs
  int32_t penalty_slot = -1;  // the sample's PenaltyState slot; -1: no history (penalties see nothing)
  // Speculative verification: a token drafted with certainty for this row
  // (the CPU's SamplerRow::draft_token), -1: none. A sampled row returns it
  // with probability p(draft) and otherwise draws from p without it; a
  // greedy row ignores it. The rows just before this one with the same
  // penalty slot, a draft each and consecutive steps (step - 1, step - 2,
  // ...) carry the drafts fed before it: its penalties count them as
  // generated, as the CPU's history holds them.
  int32_t draft_token = -1;
  // A draft drawn from a distribution q instead (the CPU's
  // SamplerRow::draft_probs): its row of sample_rows' draft_q, -1: proposed
  // with certainty. A sampled row then returns the draft with probability
  // min(1, p(draft)/q(draft)), else draws from the normalised max(0, p - q)
  // (u rescaled past the acceptance), so its id equals the draft exactly when
  // it is accepted and is distributed as p.
  int32_t draft_q_row = -1;
  // Structured outputs: its row of sample_rows' token_masks, -1: every token
  // allowed. A token the row's mask leaves out has logit -inf before
  // penalties and temperature, as in the CPU sampler's masked copy, so it is
  // never chosen, drawn or accepted as a draft.
  int32_t mask_row = -1;
};

// One entry of a draft's sparse q: q(id) = prob in row `row` of a dense
// draft_q array (scatter_draft_probs).
struct DraftProbEntry {
  int32_t row;
  int32_t id;
  float prob;
};

// A token and its logprob. Per row, kSamplingLogprobsPerRow entries: [0] the
// chosen token, [1..num_logprobs] the best tokens best first (ties lowest
// id); unused entries have token_id -1.
struct SampledLogprob {
  int32_t token_id;
  float logprob;
};
constexpr int32_t kSamplingLogprobsPerRow = 1 + kSamplingMaxLogprobs;

// Device penalty state. Per slot: counts [vocab] int32 (times each token was
// generated) and prompt_mask [prompt_mask_words(vocab)] uint32 (bit id % 32 of
// word id / 32 set when id is in the prompt). Memory: 4 * vocab + vocab / 8
// bytes per slot (~4.1 bytes per vocabulary entry: 613 KiB for 152064).
struct PenaltyState {
  int32_t* counts = nullptr;         // [num_slots, vocab]
  uint32_t* prompt_mask = nullptr;   // [num_slots, prompt_mask_words(vocab)]
  int32_t num_slots = 0;
  int32_t vocab = 0;
};

__host__ __device__ inline int64_t prompt_mask_words(int32_t vocab) { return (static_cast<int64_t>(vocab) + 31) / 32; }
inline std::size_t penalty_state_bytes(int32_t num_slots, int32_t vocab) {
  return static_cast<std::size_t>(num_slots) *
         (static_cast<std::size_t>(vocab) * sizeof(int32_t) + prompt_mask_words(vocab) * sizeof(uint32_t));
}

// The launchers return cudaErrorInvalidValue for arguments out of range
// (nothing is launched), else the launch's status (cudaPeekAtLastError).

// Clears `slot` and marks the prompt's tokens (ids outside [0, vocab) are
// ignored, as on the CPU). prompt_ids: [num_prompt_ids] device memory.
cudaError_t penalty_state_init(const PenaltyState& state, int32_t slot, const int32_t* prompt_ids,
                               int32_t num_prompt_ids, cudaStream_t stream);

// Adds one generated token per row to the counts of the row's penalty slot
// (rows with slot -1 or an invalid token are skipped). params: [num_rows],
// token_ids: [num_rows] (e.g. sample_rows' output), both device memory.
// Rows may share a slot (the counts add atomically).
cudaError_t penalty_state_append(const PenaltyState& state, const SamplingRowParams* params, const int32_t* token_ids,
                                 int32_t num_rows, cudaStream_t stream);

// Takes one generated token back per entry from the counts of its slot:
// the ids a speculative step appended past its first rejected draft
// (entries with slot -1 or an invalid token are skipped). slots,
// token_ids: [num_ids] device memory.
cudaError_t penalty_state_remove(const PenaltyState& state, const int32_t* slots, const int32_t* token_ids,
                                 int32_t num_ids, cudaStream_t stream);

// Bytes of the caller-owned workspace sample_rows needs: the processed logits.
inline std::size_t sampling_workspace_bytes(int32_t num_rows, int32_t vocab) {
  return static_cast<std::size_t>(num_rows) * static_cast<std::size_t>(vocab) * sizeof(float);
}

// Writes each entry's prob (or 0 with clear) at draft_q[row * vocab + id]
// (entries with an id outside [0, vocab) or a negative row are skipped):
// the sparse q of sampled drafts spread into the dense rows sample_rows
// reads, then cleared again so the array stays zero between steps.
// draft_q: [rows, vocab] device memory; entries: [num_entries] device memory.
cudaError_t scatter_draft_probs(float* draft_q, int32_t vocab, const DraftProbEntry* entries, int32_t num_entries,
                                bool clear, cudaStream_t stream);

// Samples one token per row. Enqueue-only: no allocation, no synchronisation.
//   logits:    [num_rows, row_stride] f32, the first vocab of each row used
//   params:    [num_rows]
//   penalties: read for rows with penalty_slot >= 0 (a slot outside it, or a state
//              of another vocab, reads as an empty history)
//   workspace: sampling_workspace_bytes(num_rows, vocab); may alias logits
//              when row_stride == vocab (the logits are then overwritten)
//   token_ids: [num_rows] out
//   logprobs:  [num_rows, kSamplingLogprobsPerRow] out, or null
//   draft_q:   [rows, vocab] f32, the q of rows with draft_q_row >= 0 (read
//              at that row), or null (draft_q_row is then ignored)
//   token_masks: [rows, prompt_mask_words(vocab)] uint32, the allowed tokens of
//              rows with mask_row >= 0 (bit id % 32 of word id / 32; XGrammar's
//              layout), or null (mask_row is then ignored)
cudaError_t sample_rows(const float* logits, int64_t row_stride, int32_t num_rows, int32_t vocab,
                        const SamplingRowParams* params, const PenaltyState& penalties, float* workspace,
                        int32_t* token_ids, SampledLogprob* logprobs, cudaStream_t stream,
                        const float* draft_q = nullptr, const uint32_t* token_masks = nullptr);

// ---- shared with the host (and the tests) ------------------------------------

// splitmix64's finaliser, the CPU's sampler_detail::mix64.
__host__ __device__ inline uint64_t sampling_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The CPU's llmk::sampler_uniform: a uniform in [0, 1) from (seed, sample, step).
__host__ __device__ inline double sampling_uniform(uint64_t seed, uint32_t sample_index, uint64_t step) {
  const uint64_t h = sampling_mix64(sampling_mix64(sampling_mix64(seed) ^ sample_index) ^ step);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

__host__ __device__ inline uint32_t sampling_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u;
#endif
}

__host__ __device__ inline float sampling_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// exp(x) for x <= 0: the CPU's sampler_detail::exp_nonpositive, the same
// polynomial and range reduction, written with rounded multiplies and adds
// so the device compiler does not contract them into FMAs (0 below -87).
__host__ __device__ inline float sampling_exp_nonpositive(float x) {
#if defined(__CUDA_ARCH__)
#define LLMK_SAMPLING_MUL(a, b) __fmul_rn(a, b)
#define LLMK_SAMPLING_ADD(a, b) __fadd_rn(a, b)
#else
#define LLMK_SAMPLING_MUL(a, b) ((a) * (b))
#define LLMK_SAMPLING_ADD(a, b) ((a) + (b))
#endif
  const float xc = x < -87.0f ? -87.0f : x;
  const float n = floorf(LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(xc, 1.44269504088896341f), 0.5f));
  const float r = LLMK_SAMPLING_ADD(LLMK_SAMPLING_ADD(xc, -LLMK_SAMPLING_MUL(n, 0.693359375f)),
                                    LLMK_SAMPLING_MUL(n, 2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(p, r), 1.3981999507e-3f);
  p = LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(p, r), 8.3334519073e-3f);
  p = LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(p, r), 4.1665795894e-2f);
  p = LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(p, r), 1.6666665459e-1f);
  p = LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(p, r), 5.0000001201e-1f);
  const float y = LLMK_SAMPLING_ADD(LLMK_SAMPLING_ADD(LLMK_SAMPLING_MUL(LLMK_SAMPLING_MUL(p, r), r), r), 1.0f);
  const float scale = sampling_bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float result = LLMK_SAMPLING_MUL(y, scale);
#undef LLMK_SAMPLING_MUL
#undef LLMK_SAMPLING_ADD
  return x < -87.0f ? 0.0f : result;
}

}  // namespace llmk::cuda
