// A sampled draft's q on the device (contract in sampling.hpp): the sparse
// (id, prob) entries spread into the dense rows sample_rows reads, and
// cleared again after it.
#include "cuda_compat.hpp"
#include "sampling.hpp"

namespace llmk::cuda {
namespace {

constexpr int kScatterThreads = 256;

// draft_q: [rows, vocab]; entries: [num_entries], one thread each.
__global__ void __launch_bounds__(kScatterThreads, 1) scatter_draft_probs_kernel(float* __restrict__ draft_q, int32_t vocab,
                                                                                 const DraftProbEntry* __restrict__ entries,
                                                                                 int32_t num_entries, bool clear) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_entries) return;
  const DraftProbEntry e = entries[i];
  if (e.row < 0 || e.id < 0 || e.id >= vocab) return;
  draft_q[static_cast<int64_t>(e.row) * vocab + e.id] = clear ? 0.0f : e.prob;
}

}  // namespace

cudaError_t scatter_draft_probs(float* draft_q, int32_t vocab, const DraftProbEntry* entries, int32_t num_entries,
                                bool clear, cudaStream_t stream) {
  if (num_entries < 0 || vocab <= 0 || (num_entries > 0 && (draft_q == nullptr || entries == nullptr)))
    return cudaErrorInvalidValue;
  if (num_entries == 0) return cudaSuccess;
  LLMK_LAUNCH((num_entries + kScatterThreads - 1) / kScatterThreads, kScatterThreads, 0, stream,
              scatter_draft_probs_kernel)(draft_q, vocab, entries, num_entries, clear);
  return cudaPeekAtLastError();
}

}  // namespace llmk::cuda
