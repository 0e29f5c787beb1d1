// Rotary embedding (contract in rope.hpp).
#include "cuda_compat.hpp"
#include "rope.hpp"

namespace llmk::cuda {
namespace {

// q: [num_tokens, num_heads, head_dim] (q_stride), k: [num_tokens, num_kv_heads, head_dim] (k_stride),
// positions: [num_tokens], tables: [max_positions, head_dim / 2], inv_freq:
// [head_dim / 2] or null (every position in the tables). One block per token;
// thread j handles pairs j, j + blockDim.x, ... of the token's q heads, then k heads.
__global__ void __launch_bounds__(kRopeThreads, 1) rope_kernel(float* q, int64_t q_stride, int64_t num_heads, float* k, int64_t k_stride,
                            int64_t num_kv_heads, int64_t head_dim, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos_table, const float* __restrict__ sin_table,
                            int64_t max_positions, const double* __restrict__ inv_freq) {
  const int64_t token = blockIdx.x;
  const int64_t half = head_dim / 2;
  const int64_t position = positions[token];
  const bool in_tables = inv_freq == nullptr || position < max_positions;  // the same for the whole block
  const float* c = cos_table + (in_tables ? position : 0) * half;
  const float* s = sin_table + (in_tables ? position : 0) * half;
  const int64_t num_pairs = (num_heads + num_kv_heads) * half;
  for (int64_t pair = threadIdx.x; pair < num_pairs; pair += blockDim.x) {
    const int64_t head = pair / half, i = pair % half;
    float* x = head < num_heads ? q + token * q_stride + head * head_dim
                                : k + token * k_stride + (head - num_heads) * head_dim;
    float ci, si;
    if (in_tables) {
      ci = c[i];
      si = s[i];
    } else {
      const double angle = static_cast<double>(position) * inv_freq[i];
      ci = static_cast<float>(cos(angle));
      si = static_cast<float>(sin(angle));
    }
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * ci - x2 * si;
    x[i + half] = x2 * ci + x1 * si;
  }
}

}  // namespace

cudaError_t rope(float* q, int64_t q_stride, int64_t num_heads, float* k, int64_t k_stride, int64_t num_kv_heads,
                 int64_t num_tokens, int64_t head_dim, const int32_t* positions, const float* cos_table,
                 const float* sin_table, int64_t max_positions, const double* inv_freq, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || num_tokens < 0 || num_heads < 0 || num_kv_heads < 0)
    return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  LLMK_LAUNCH(static_cast<unsigned>(num_tokens), kRopeThreads, 0, stream, rope_kernel)(
      q, q_stride, num_heads, k, k_stride, num_kv_heads, head_dim, positions, cos_table, sin_table, max_positions,
      inv_freq);
  return cudaGetLastError();
}

cudaError_t rope(float* q, int64_t q_stride, int64_t num_heads, float* k, int64_t k_stride, int64_t num_kv_heads,
                 int64_t num_tokens, int64_t head_dim, const int32_t* positions, const float* cos_table,
                 const float* sin_table, cudaStream_t stream) {
  return rope(q, q_stride, num_heads, k, k_stride, num_kv_heads, num_tokens, head_dim, positions, cos_table,
              sin_table, 0, nullptr, stream);
}

}  // namespace llmk::cuda
