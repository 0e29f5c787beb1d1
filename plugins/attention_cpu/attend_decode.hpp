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
//   - accumulates P V.
// Query heads of one GQA group meet the same K/V rows while they sit in L1.
// A range of every KV head (whole rows) is read row after row: each row's
// keys for every head (its values requested meanwhile), then the softmax
// updates, then the values head by head from cache (tile_rows); a part of
// the heads is read head by head, each head's slice of the tile's rows
// (tile_head). Both do the same operations in the same order for each head:
// the same bits.
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
  float* part = nullptr;   // [num_heads, kDecodeTile, 16] partial dot products (whole-row tiles)
  float* p = nullptr;      // [num_heads, kDecodeTile] a tile's softmax weights (whole-row tiles)
  float* alpha = nullptr;  // [num_heads] a tile's accumulator corrections (whole-row tiles)
};

// Floats each DecodeScratch array needs: {m, l and alpha, acc, k_buf and v_buf, part, p}.
struct DecodeScratchSize {
  size_t per_head = 0, acc = 0, tile = 0, part = 0, p = 0;
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
// at 2048 0.36-0.42 -> 0.32-0.35 ms. Since whole rows are read in address
// order (attend_decode_driver.hpp, decode_rows), spans pay from 512
// positions: --cold 1, one sequence, spans from 2048 -> from 512 (with one
// KV-head range per span once there are spans for every thread; measured
// with an earlier form of tile_rows), two alternating pairs: F16 at 1024
// positions 0.205, 0.187 -> 0.162, 0.168 ms a layer, F32 at 2048 0.627,
// 0.701 -> 0.535, 0.576 ms, F32 at 784 unchanged (0.257, 0.246 -> 0.244,
// 0.265). llama-110m int4 decode at 960-992 positions (F16 cache,
// bench_forward_cpu --ops 1), before all this and after, three pairs:
// attention 1698, 1570, 1847 -> 1370, 1794, 1449 us a token. Below 512 a
// sequence alone is split by KV heads.
constexpr int64_t kDecodeSpan = 256;
constexpr int64_t kDecodeSpansFrom = 512;

// One span's unnormalized state for num_heads query heads: m[num_heads],
// l[num_heads], acc[num_heads * head_dim], contiguous.
inline size_t decode_span_floats(uint32_t num_heads, uint32_t head_dim) {
  return static_cast<size_t>(num_heads) * (head_dim + 2);
}

// out[h] = the softmax-weighted sum over every span: spans hold num_spans
// consecutive span states (decode_span_floats each), in position order.
void merge_decode_spans(const float* spans, int num_spans, uint32_t num_heads, uint32_t head_dim, float* out);

}  // namespace llmk::attention_cpu
