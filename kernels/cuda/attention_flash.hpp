// Causal prefill attention over the paged KV cache on tensor cores: the
// prefill half of the attention.cuda plugin's work, with the semantics of
// attention_paged (plugins/api/llmk_attention.h) for the sequences it serves.
//
// What it serves. Sequence s of the step is served when its
// query_len = query_start[s+1] - query_start[s] is at least min_query_len;
// the output rows of every other sequence are left untouched, so decodes
// (query_len 1) go to a decode kernel in the same step. The caller routes:
// attention_flash(..., min_query_len = m) plus a kernel serving query_len < m
// covers every sequence. It only reads the cache: the step's rows must be in
// it already (kv_cache_write runs first).
//
// Work split. A block owns one query tile of one sequence (tiles never
// straddle sequences) and one KV head: kFlashRows rows of (token, query head)
// pairs, token-major, for the heads_per_block = min(group, kFlashRows) query
// heads of that KV head (group = num_heads / num_kv_heads) and
// tokens_per_block = kFlashRows / heads_per_block consecutive tokens; groups
// larger than kFlashRows take several head chunks. So every K/V tile loaded
// into shared memory serves all the query heads that read it (GQA without
// repeating K/V). Grid: x = num_seqs + num_tokens / tokens_per_block tiles,
// an upper bound known on the host: sequence s owns tiles from
// s + query_start[s] / tokens_per_block on (a block finds its sequence by a
// binary search over that, and returns at once if its tile lies past the
// sequence's queries or the sequence is not served); y = num_kv_heads x head
// chunks. kFlashWarps warps, each owning 16 rows.
//
// Per block: the scaled q rows (q * scale * log2 e) go to the operand type in
// shared memory and into WMMA fragments that stay in registers. Then for each
// tile of keys (64, 32 or 16 keys for head_dim up to 64, 128, 256), from the
// first key the block's earliest row sees (sliding window) to the last
// row's position:
//   1. the tile's slots from the block table, then K and V rows converted to
//      the operand type into shared memory (keys past the context: zeros);
//   2. per warp, skipped when the tile holds no key its rows see:
//      S = Q K^T on tensor cores (16x16x16, f32 accumulation), stored to
//      shared memory; two lanes per row mask it (causal, window), update the
//      running max m, compute P = exp2(S - m) rounded to the operand type
//      and add those rounded values to the running sum; the O accumulators
//      are rescaled by exp2(m_old - m_new) through shared memory, only when
//      some row's max moved; O += P V on tensor cores.
// Attention sinks (sink_tokens S > 0): the loop above runs twice with one
// softmax state, first over the sinks [0, min(S, last position + 1)) with
// the q_sink rows staged and loaded as q was (each row masks keys past its
// position), then over the keys from S on with q (the window's mask on top).
// Token trees (step.tree_parents, attention_tree.hpp): a tree's rows mask
// the new keys that are not their ancestors (or themselves), and count the
// window from their text position; the block's and warps' first keys are
// then taken from the sequence's first new position.
// Finally O / sum goes to `out` in the activation dtype.
//
// Operands: F16 for an F16 cache, BF16 for BF16, I8 and F32 caches (I8 and
// F32 tiles are dequantized / rounded in shared memory). F16 would keep 3
// more bits of q and P, but an F32 or dequantized I8 value may exceed F16's
// range, and BF16 cannot overflow where F32 does not. Accumulation is f32.
//
// Shared memory: at most ~45 KiB of dynamic shared memory (under the 48 KiB
// default, no attribute needed); see flash_shared_bytes in the .cu file.
#pragma once

#include <cstdint>

#include "attention_paged.hpp"

namespace llmk::cuda {

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * 32;
constexpr int kFlashRows = kFlashWarps * 16;  // (token, query head) rows per block
constexpr int kFlashMaxHeadDim = 256;
// Serves every sequence with more than one new token: decodes go elsewhere.
constexpr int32_t kFlashDefaultMinQueryLen = 2;

// cudaErrorInvalidValue for a shape this kernel cannot serve (those of
// check_paged_attention_shape), cudaSuccess otherwise.
cudaError_t check_flash_attention_shape(const PagedAttentionShape& shape);

// q, out: [num_tokens, num_heads, head_dim] of activation_dtype, device (not
// overlapping); cache: already holding this step's rows. Writes the output
// rows of the sequences with query_len >= min_query_len (>= 1) and no others.
// q_sink: as q, the queries that score the sinks (shape.sink_tokens > 0);
// null: q scores them. The step's metadata is trusted as in attention_paged.
cudaError_t attention_flash(const PagedAttentionShape& shape, const PagedAttentionStep& step, const void* q,
                            const PagedKvCache& cache, void* out, cudaStream_t stream,
                            int32_t min_query_len = kFlashDefaultMinQueryLen, const void* q_sink = nullptr);

}  // namespace llmk::cuda
