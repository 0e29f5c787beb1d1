// Token embedding gather: hidden[t, :] = float(table[ids[t], :]); and the
// fed-back ids a step planned ahead takes from the previous step's sampler.
//
// A token id outside [0, vocab) writes nothing to its row (the row keeps
// whatever it held) and adds 1 to *num_invalid_ids, which the caller zeroes
// before the launch and may read back after; the host validates ids before
// a step, so a non-zero count is a bug upstream, not a user error.
//
// Launch: one block per token (grid num_tokens), 128 threads across dim.
// num_tokens == 0 launches nothing.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "dtype.hpp"

namespace llmk::cuda {

constexpr int kEmbeddingThreads = 128;

// table: [vocab, dim] of table_dtype (f32, f16 or bf16), device;
// ids: [num_tokens] int32, device; hidden: [num_tokens, dim] f32, device;
// num_invalid_ids: one int32 in device memory (may be null: then invalid ids
// are skipped silently). Any other dtype returns cudaErrorInvalidValue and
// launches nothing.
cudaError_t embedding(const void* table, DType table_dtype, int64_t vocab, int64_t dim, const int32_t* ids,
                      int64_t num_tokens, float* hidden, int32_t* num_invalid_ids, cudaStream_t stream);

// ids[rows[i]] = previous_ids[previous_rows[i]] for i < count: a step
// planned before the previous one's ids were back (core/step.hpp, fed_back).
// An id outside [0, vocab) (a failed sampling) becomes 0: its row's output
// is discarded, the embedding must still read a valid row. One block.
// count == 0 launches nothing.
constexpr int kFedBackThreads = 128;
cudaError_t gather_fed_back_ids(int32_t* ids, const int32_t* rows, const int32_t* previous_rows, int32_t count,
                                const int32_t* previous_ids, int64_t vocab, cudaStream_t stream);

}  // namespace llmk::cuda
