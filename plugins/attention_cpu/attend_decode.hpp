// Decode attention: one new query token of one sequence against its cached
// context (or the window of it the model allows), for all query heads of a range of KV heads.
//
// A decode step reads every cached K/V row of every running sequence once, so
// it is bound by memory traffic and by how little work surrounds each key.
// This kernel walks the context in tiles of 16 positions; for each tile it
// takes the tile's K/V rows of every KV head in the range (contiguous memory
// within a slot) and, per query head:
//   - forms 16 partial dot-product vectors and folds them into one vector of
//     16 scores with a shuffle tree (no per-key horizontal sum),
//   - updates the online softmax once per tile on that vector,
//   - accumulates P V into accumulators held in registers.
// Query heads of one GQA group meet the same K/V rows while they sit in L1.
#pragma once

#include <cstdint>

#include "plugins/api/llmk_attention.h"
#include "plugins/attention_cpu/kv_rows.hpp"

namespace llmk::attention_cpu {

constexpr int kDecodeTile = 16;  // context positions per online-softmax update

// True when this kernel serves the head size (a multiple of 16, at most 256)
// on this build (AVX-512, or AVX2 + FMA: attend_decode_avx2.cpp).
bool decode_supports(int head_dim);

// One decode query: the query heads of KV heads [kv_begin, kv_end), over
// positions [first_pos, context_len): the whole visible context, or one span
// of it (then out is null and the kernel leaves its unnormalized state in
// the scratch's m, l and acc, for merge_decode_spans).
struct DecodeQuery {
  const float* q;         // [num_heads, head_dim] of the token
  float* out;             // [num_heads, head_dim] of the token; null: leave m, l, acc in the scratch
  const int32_t* table;   // the sequence's block table
  uint32_t block_size;
  int64_t first_pos;      // positions first_pos .. context_len - 1 are read
                          // (> 0 under a sliding window or in a later span)
  int64_t context_len;
  uint32_t kv_begin, kv_end;
  uint32_t group;         // query heads per KV head
  float scale;
};

// Per-thread scratch, carved from the caller's workspace.
struct DecodeScratch {
  float* m = nullptr;      // [num_heads] running max per query head
  float* l = nullptr;      // [num_heads] running sum
  float* acc = nullptr;    // [num_heads, head_dim] accumulators
  float* k_buf = nullptr;  // I8 caches: [kDecodeTile, num_kv_heads, head_dim], one dequantized tile; else null
  float* v_buf = nullptr;
};

// Floats each DecodeScratch array needs: {m and l, acc, k_buf and v_buf}.
struct DecodeScratchSize {
  size_t per_head = 0, acc = 0, tile = 0;
};
DecodeScratchSize decode_scratch_size(const KvShape& shape, uint32_t num_heads);

void attend_decode(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& query, DecodeScratch& s);

// A long context (more than kDecodeSpansFrom visible positions) is cut into
// spans of kDecodeSpan positions (at multiples of kDecodeSpan, so the cut
// depends on the sequence alone, never on the batch or the thread count),
// each span an item of its own: a single sequence's decode then spreads over
// the threads by position, each thread reading whole slot rows (every KV
// head) instead of one or two heads' slice of each row. bench_attention_cpu,
// one sequence of 12 x 64 heads, 2-core Zen 4, old and new alternating: F16
// at 32000 positions 9.2-10.3 -> 5.0-6.1 ms a layer; F32 at 8192 2.6-2.7 ->
// 1.9-2.0 ms; from memory (--cold 1), F16 at 8192 2.24-2.46 -> 1.25-1.44 ms,
// at 2048 0.36-0.42 -> 0.32-0.35 ms. Shorter contexts stay whole: in
// llama-110m's int4 forward at 900-932 positions (F16 cache), four spans of
// two head ranges each took 8-25% longer than six ranges of two heads over
// the whole context.
constexpr int64_t kDecodeSpan = 256;
constexpr int64_t kDecodeSpansFrom = 2048;

// One span's unnormalized state for num_heads query heads: m[num_heads],
// l[num_heads], acc[num_heads * head_dim], contiguous.
inline size_t decode_span_floats(uint32_t num_heads, uint32_t head_dim) {
  return static_cast<size_t>(num_heads) * (head_dim + 2);
}

// out[h] = the softmax-weighted sum over every span: spans hold num_spans
// consecutive span states (decode_span_floats each), in position order.
void merge_decode_spans(const float* spans, int num_spans, uint32_t num_heads, uint32_t head_dim, float* out);

}  // namespace llmk::attention_cpu
