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

// One decode query: the query heads of KV heads [kv_begin, kv_end).
struct DecodeQuery {
  const float* q;         // [num_heads, head_dim] of the token
  float* out;             // [num_heads, head_dim] of the token
  const int32_t* table;   // the sequence's block table
  uint32_t block_size;
  int64_t first_pos;      // positions first_pos .. context_len - 1 are visible (> 0 under a sliding window)
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

}  // namespace llmk::attention_cpu
