// Paged attention on the device, correct before fast: the kernels behind the
// attention.cuda plugin, with the semantics of plugins/api/llmk_attention.h.
//
// A run is two launches on one stream:
//   1. kv_cache_write: the step's new K/V rows go into the layer's cache at
//      slot_mapping (a negative slot skips the row), rounded to the cache
//      dtype (I8: quantized per group of kv_group_size with an f32 scale).
//   2. attention_paged: causal attention of every new query over its
//      sequence's context through the block tables. Sequence s owns query
//      rows [query_start[s], query_start[s+1]); they are the last
//      query_len = query_start[s+1] - query_start[s] positions of its
//      context_lens[s] positions, so prefill chunks on a cached prefix and
//      decodes (query_len 1) mix freely in one step. Position p of sequence s
//      lives at slot block_tables[s * max_blocks_per_seq + p / block_size]
//      + p % block_size. Query head h reads KV head h / (num_heads / num_kv_heads).
//      With sliding_window W > 0 the query at position p sees positions
//      max(0, p - W + 1) .. p. Attention sinks (sink_tokens S > 0,
//      StreamingLLM): positions 0 .. min(S, p + 1) - 1 are seen whatever the
//      window, scored with the row's q_sink (the query rotated by its cache
//      position; null: q), the window then covering positions S and later.
//      Token trees (tree_parents, attention API 3.3): a tree's new rows see
//      the cached positions and, of the new tokens, their ancestors and
//      themselves only; the window counts from the row's text position
//      (cached + its depth), see attention_tree.hpp.
//      Softmax is online (a running max and running sum, rescaled per tile
//      of keys, the sinks first) with f32 accumulation throughout.
//
// Launch shapes: kv_cache_write one block per new token, kKvWriteThreads
// threads across num_kv_heads * head_dim; attention_paged one block per
// (token, query head) (grid num_tokens x num_heads), kAttentionThreads
// threads: each tile of kAttentionThreads keys is scored one key per thread
// (q in shared memory), and the weighted V sum runs one head_dim element
// per thread. No workspace; nothing is allocated.
//
// The metadata is trusted: the caller (the plugin's plan()) has checked
// that block tables and slots lie inside the cache, query_start is
// non-decreasing, and context_lens[s] >= query_len of s.
#pragma once

#include <cstdint>

// Toolkit headers only (types, no functions): host code of either build, the
// CUDA runtime's or the simulation's, includes this launcher header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "dtype.hpp"

namespace llmk::cuda {

constexpr int kKvWriteThreads = 128;
constexpr int kAttentionThreads = 128;
constexpr int kAttentionMaxHeadDim = 256;

// The layer's fixed shape (the plugin's desc).
struct PagedAttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;      // divides num_heads
  int32_t head_dim = 0;          // 1 .. kAttentionMaxHeadDim
  float scale = 1.0f;            // softmax scale, usually 1/sqrt(head_dim)
  int32_t sliding_window = 0;    // keys visible to a query, itself included; 0 = the whole context
  DType activation_dtype = DType::f32;  // q, k, v, out: F32, F16 or BF16
  DType kv_dtype = DType::f32;          // the cache: F32, F16, BF16 or I8 (group-quantized)
  int32_t kv_group_size = 0;                     // I8: elements sharing one scale, divides head_dim
  int32_t sink_tokens = 0;       // cache positions always visible, scored with q_sink; 0 = none
};

// One layer's cache in the standard layout (kv_access.hpp): k, v
// [num_slots, num_kv_heads, head_dim] of kv_dtype; for I8 also k_scale,
// v_scale [num_slots, num_kv_heads, head_dim / kv_group_size] (null otherwise).
struct PagedKvCache {
  void* k = nullptr;
  void* v = nullptr;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
};

// One step's metadata, device arrays (llmk_attention_step's device_* arrays).
struct PagedAttentionStep {
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;               // tokens per block table entry, > 0
  const int32_t* query_start = nullptr;   // [num_seqs + 1], query_start[num_seqs] == num_tokens
  const int32_t* context_lens = nullptr;  // [num_seqs], new tokens included
  const int32_t* slot_mapping = nullptr;  // [num_tokens]; < 0: not stored
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]: first slot of each block
  // [num_tokens]: each new token's parent among its sequence's new tokens
  // (-1: the cached context), checked by the caller; null: every sequence causal.
  const int32_t* tree_parents = nullptr;
};

// Returns cudaErrorInvalidValue (launching nothing) for a shape these
// kernels cannot serve; cudaSuccess otherwise.
cudaError_t check_paged_attention_shape(const PagedAttentionShape& shape);

// k, v: [num_tokens, num_kv_heads, head_dim] of activation_dtype, device.
// An I8 cache quantizes each group of a row as the CPU engine does
// (kv_access.hpp): the same bytes and scales for the same input.
cudaError_t kv_cache_write(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* k,
                           const void* v, const PagedKvCache& cache, cudaStream_t stream);

// q, out: [num_tokens, num_heads, head_dim] of activation_dtype, device (not overlapping).
// cache: already holding this step's rows. Only sequences with at least
// min_query_len new rows are served (2: every prefill, none of the decodes,
// whose rows are left for attention_decode); the others' rows are not written.
// q_sink: [num_tokens, num_heads, head_dim] of activation_dtype, the queries
// that score the sinks (shape.sink_tokens > 0); null: q scores them.
cudaError_t attention_paged(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                            const PagedKvCache& cache, void* out, cudaStream_t stream, int32_t min_query_len = 1,
                            const void* q_sink = nullptr);

// Both, in order: one layer of one step.
cudaError_t attention_paged_run(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                                const void* k, const void* v, const PagedKvCache& cache, void* out,
                                cudaStream_t stream, const void* q_sink = nullptr);

}  // namespace llmk::cuda
