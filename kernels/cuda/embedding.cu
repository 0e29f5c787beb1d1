// Embedding gather (contract in embedding.hpp).
#include "cuda_compat.hpp"
#include "embedding.hpp"

#include "device_common.hpp"

namespace llmk::cuda {
namespace {

// table: [vocab, dim]; ids: [num_tokens]; hidden: [num_tokens, dim]. One block per token.
template <class T>
__global__ void __launch_bounds__(kEmbeddingThreads, 1) embedding_kernel(const T* __restrict__ table, int64_t vocab, int64_t dim,
                                 const int32_t* __restrict__ ids, float* __restrict__ hidden,
                                 int32_t* num_invalid_ids) {
  const int64_t token = blockIdx.x;
  const int64_t id = ids[token];
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0 && num_invalid_ids != nullptr) atomicAdd(num_invalid_ids, 1);
    return;
  }
  const T* row = table + id * dim;
  float* out = hidden + token * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[i] = device::to_float(row[i]);
}

template <class T>
cudaError_t launch_embedding(const void* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t num_tokens,
                             float* hidden, int32_t* num_invalid_ids, cudaStream_t stream) {
  LLMK_LAUNCH(static_cast<unsigned>(num_tokens), kEmbeddingThreads, 0, stream, embedding_kernel<T>)(
      static_cast<const T*>(table), vocab, dim, ids, hidden, num_invalid_ids);
  return cudaGetLastError();
}

__global__ void __launch_bounds__(kFedBackThreads, 1) gather_fed_back_kernel(int32_t* __restrict__ ids, const int32_t* __restrict__ rows,
                                      const int32_t* __restrict__ previous_rows, int32_t count,
                                      const int32_t* __restrict__ previous_ids, int64_t vocab) {
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int32_t id = previous_ids[previous_rows[i]];
    ids[rows[i]] = id >= 0 && id < vocab ? id : 0;
  }
}

}  // namespace

cudaError_t gather_fed_back_ids(int32_t* ids, const int32_t* rows, const int32_t* previous_rows, int32_t count,
                                const int32_t* previous_ids, int64_t vocab, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  LLMK_LAUNCH(1u, kFedBackThreads, 0, stream, gather_fed_back_kernel)(ids, rows, previous_rows, count, previous_ids,
                                                                     vocab);
  return cudaGetLastError();
}

cudaError_t embedding(const void* table, DType table_dtype, int64_t vocab, int64_t dim, const int32_t* ids,
                      int64_t num_tokens, float* hidden, int32_t* num_invalid_ids, cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  switch (table_dtype) {
    case DType::f32:
      return launch_embedding<float>(table, vocab, dim, ids, num_tokens, hidden, num_invalid_ids, stream);
    case DType::f16:
      return launch_embedding<__half>(table, vocab, dim, ids, num_tokens, hidden, num_invalid_ids, stream);
    case DType::bf16:
      return launch_embedding<__nv_bfloat16>(table, vocab, dim, ids, num_tokens, hidden, num_invalid_ids, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace llmk::cuda
