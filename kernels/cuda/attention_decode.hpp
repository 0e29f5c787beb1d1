// Paged attention for decoding: sequences with exactly one new query token,
// with the semantics of attention_paged (plugins/api/llmk_attention.h) for
// those rows. The KV rows are read once per KV head, not once per query head,
// and the context is cut into splits that run in parallel.
//
// A run is one or two launches on one stream, after kv_cache_write:
//   1. attention_decode: one block per (split, KV head, sequence), grid
//      (num_splits, num_kv_heads * head_chunks, num_seqs), kDecodeThreads
//      threads. The block serves up to kDecodeMaxHeadsPerBlock query heads of
//      its KV head (more heads per KV head: head_chunks =
//      ceil(group / kDecodeMaxHeadsPerBlock) blocks, each reading the rows).
//      Split i covers the visible keys [i * P, (i + 1) * P) of the sequence,
//      counted in order: its sinks first (positions 0 .. min(S, context_len)
//      - 1 with sink_tokens S > 0, scored with the q_sink row), then its last
//      keys from max(context_len - W, S) on under a sliding window W (from S
//      on without one). P, the partition, is the same for every sequence of
//      the step: the longest visible context among the step's decodes divided
//      by num_splits, rounded up to whole tiles of kDecodeTileKeys. Each block
//      derives P on the device from the step's arrays, so P is not a launch
//      argument: a CUDA graph captured with num_splits stays right as
//      contexts grow. Splits past a sequence's visible keys exit at once.
//      A sequence that needs one split writes its output directly; otherwise
//      each split writes its running max, its running sum and its
//      unnormalized f32 accumulator per query head to the workspace.
//   2. attention_decode_merge (only when num_splits > 1): one block per
//      (query head, sequence), grid (num_heads, num_seqs), kDecodeThreads
//      threads, combining a sequence's splits with log-sum-exp rescaling.
//
// Sequences whose query_len is not 1 (prefills, and sequences with no new
// rows) are skipped by both kernels: their output rows are not written, so a
// prefill kernel may serve them in the same step, before or after.
//
// Everything is f32 inside; q and out are F32, F16 or BF16, the cache F32,
// F16, BF16 or I8 (group-quantized, read through kv_access.hpp). head_dim up
// to kAttentionMaxHeadDim (with sinks at the widest heads the launch raises
// the kernel's dynamic shared memory limit). No allocation, no
// synchronization: the workspace comes from the caller, sized by
// attention_decode_workspace_bytes, so the launches can be captured in a
// CUDA graph. The metadata is trusted as in
// attention_paged.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_paged.hpp"

namespace llmk::cuda {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeTileKeys = 32;          // keys per tile: one lane per key in the softmax
constexpr int kDecodeMaxHeadsPerBlock = 8;   // query heads sharing one block's K/V reads
constexpr int kDecodeMinPartitionKeys = 256; // attention_decode_num_splits keeps splits at least this long
constexpr int kDecodeBlocksPerSm = 4;        // attention_decode_num_splits' target occupancy
constexpr int kDecodeDefaultSmCount = 132;   // an H100 SXM, when the caller gives no SM count

// Workspace bytes one attention_decode call needs: 0 for one split;
// otherwise num_seqs * num_heads * num_splits * (head_dim + 2) f32 values
// (the accumulators, then the maxima, then the sums).
size_t attention_decode_workspace_bytes(const PagedAttentionShape& shape, int32_t num_seqs, int32_t num_splits);

// Keys a decode of a context_len-token context sees under the shape's
// window and sinks (what attention_decode_num_splits' max_context_len means).
int32_t attention_decode_visible_keys(const PagedAttentionShape& shape, int32_t context_len);

// The number of splits for a step whose longest decode sees max_context_len
// keys (attention_decode_visible_keys), with num_seqs
// sequences and num_kv_heads KV heads, on a device of num_sms SMs (<= 0:
// kDecodeDefaultSmCount). A power of two: enough blocks for
// kDecodeBlocksPerSm per SM, but no split shorter than
// kDecodeMinPartitionKeys keys. The reasons are in attention_decode.cu.
int32_t attention_decode_num_splits(int32_t max_context_len, int32_t num_seqs, int32_t num_kv_heads,
                                    int32_t num_sms);

// q, out: [num_tokens, num_heads, head_dim] of activation_dtype, device (not
// overlapping); only the rows of decoding sequences are read and written.
// cache: already holding this step's rows (kv_cache_write). workspace: device,
// at least attention_decode_workspace_bytes(shape, step.num_seqs,
// num_splits) bytes (workspace_bytes says how many it has), 4-byte aligned;
// may be null with one split. num_splits >= 1, any value: splits beyond a
// sequence's needs exit at once. q_sink: as q, the queries that score the
// sinks (shape.sink_tokens > 0); null: q scores them. Returns
// cudaErrorInvalidValue, launching nothing, for a shape, step or workspace
// it cannot serve.
cudaError_t attention_decode(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                             const PagedKvCache& cache, void* out, void* workspace, size_t workspace_bytes,
                             int32_t num_splits, cudaStream_t stream, const void* q_sink = nullptr);

}  // namespace llmk::cuda
