// The decode kernel's driver (attend_decode.hpp), shared by its AVX-512
// and AVX2 builds: for one query's range of KV heads, walk the context in
// tiles of kDecodeTile positions (rows found through the block table, I8
// rows dequantized first, the next tile's rows prefetched head by head),
// hand each (query head, tile) to the ISA's tile kernel, and
// normalize the accumulators at the end. Each build includes this header
// inside its own ISA guard and passes its own tile kernel.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/cpu/kv_quant.hpp"
#include "plugins/attention_cpu/attend_decode.hpp"

namespace llmk::attention_cpu::decode_driver {

// An I8 slot's rows of the query's KV-head range, as floats. Groups never
// straddle heads, so the range's values and scales are contiguous.
inline void dequantize_range(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& dq, int64_t slot,
                             int64_t row, int64_t range, float* k_out, float* v_out) {
  const int64_t groups = shape.head_dim / shape.group_size;
  const int64_t scale_at = (slot * shape.num_kv_heads + dq.kv_begin) * groups;
  const int64_t at = slot * row + static_cast<int64_t>(dq.kv_begin) * shape.head_dim;
  kernels::cpu::kv_dequantize_row(static_cast<const int8_t*>(kv.k) + at, kv.k_scale + scale_at, k_out, range,
                                  shape.group_size);
  kernels::cpu::kv_dequantize_row(static_cast<const int8_t*>(kv.v) + at, kv.v_scale + scale_at, v_out, range,
                                  shape.group_size);
}

// Asks for the cache lines of [p, p + bytes) to be brought into L2.
inline void request_lines(const void* p, int64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t at = begin & ~uintptr_t{63}; at < end; at += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
}

// A query's softmax state before its first tile: no maximum, no sum.
inline void start_state(DecodeScratch& s, uint32_t heads, int64_t hd) {
  std::fill_n(s.m, heads, -std::numeric_limits<float>::infinity());
  std::fill_n(s.l, heads, 0.0f);
  std::fill_n(s.acc, heads * hd, 0.0f);
}

// The query's output rows from its state, unless it is one span of a longer
// context (out null: the caller merges the spans' states).
inline void finish_state(const DecodeQuery& dq, const DecodeScratch& s, uint32_t heads, int64_t hd) {
  if (dq.out == nullptr) return;
  float* out = dq.out + static_cast<int64_t>(dq.kv_begin) * dq.group * hd;
  for (uint32_t qh = 0; qh < heads; ++qh) {
    const float inv = s.l[qh] > 0.0f ? 1.0f / s.l[qh] : 0.0f;
    for (int64_t i = 0; i < hd; ++i) out[qh * hd + i] = s.acc[qh * hd + i] * inv;
  }
}

// E: the element type read by the tiles (float for F32 caches and for I8
// caches, which are dequantized into s.k_buf / s.v_buf first; uint16_t F16 bits).
// tile(q, k_rows, v_rows, off, n, scale, m, l, acc) is the ISA's
// tile_head<NV, E>: one query head meets one tile of up to kDecodeTile
// positions.
template <int NV, class E, class Tile>
void decode_query(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& dq, DecodeScratch& s,
                  const Tile& tile) {
  constexpr int64_t hd = 16 * NV;
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * hd;  // one slot's K (or V) row
  const uint32_t num_kv = dq.kv_end - dq.kv_begin;
  const int64_t range = static_cast<int64_t>(num_kv) * hd;           // the range's part of it
  const uint32_t heads = num_kv * dq.group;
  start_state(s, heads, hd);
  const float* q = dq.q + static_cast<int64_t>(dq.kv_begin) * dq.group * hd;

  // The next tile's rows are requested while this one computes, one KV
  // head's slice at a time, just before the same head of this tile: the
  // requests are spread over the tile's work instead of queued in one burst
  // (bench_attention_cpu on a 2-core Zen 4, 64 sequences x 192 positions of
  // 12 x 64 heads, old and new alternating: F16 rows 1.97-2.79 ms a layer
  // with the whole next tile requested up front, 1.49-1.75 ms spread out;
  // F32 rows, not requested before, 3.58-4.19 -> 2.63-2.98 ms). I8 rows
  // (values and scales) are requested the same way and dequantized into the
  // scratch tile when their tile comes: 12 x 64 heads, 64 x 1024 positions,
  // 11.1-12.8 -> 8.5-10.3 ms a layer, 64 x 192 1.9-2.2 -> 1.72-1.76 ms. Not
  // with four or more query heads per KV head, where the tiles' arithmetic
  // bounds the I8 path and the requests only add instructions (32 / 4
  // heads, 64 x 192: 1.42-1.59 ms without, 1.55-1.80 with).
  const bool prefetch_next = !shape.int8;
  const bool request_i8 = shape.int8 && dq.group < 4;
  const int64_t groups = shape.int8 ? hd / shape.group_size : 0;  // I8 scales per head
  const int8_t* k8_next[kDecodeTile];
  const int8_t* v8_next[kDecodeTile];
  const float* ks_next[kDecodeTile];
  const float* vs_next[kDecodeTile];
  // A slot's rows of the query's KV-head range, in a cache of E elements.
  auto rows_at = [&](const void* base, int64_t slot) {
    return static_cast<const E*>(base) + slot * row + static_cast<int64_t>(dq.kv_begin) * hd;
  };
  const E* k_next[kDecodeTile];
  const E* v_next[kDecodeTile];
  const E* k_rows[kDecodeTile];
  const E* v_rows[kDecodeTile];
  for (int64_t t0 = dq.first_pos; t0 < dq.context_len; t0 += kDecodeTile) {
    const int n = static_cast<int>(std::min<int64_t>(kDecodeTile, dq.context_len - t0));
    for (int j = 0; j < n; ++j) {
      const int64_t slot = slot_of(dq.table, dq.block_size, t0 + j);
      if (std::is_same_v<E, uint16_t> || !shape.int8) {
        k_rows[j] = rows_at(kv.k, slot);
        v_rows[j] = rows_at(kv.v, slot);
      } else if constexpr (std::is_same_v<E, float>) {
        dequantize_range(kv, shape, dq, slot, row, range, s.k_buf + j * range, s.v_buf + j * range);
        k_rows[j] = s.k_buf + j * range;
        v_rows[j] = s.v_buf + j * range;
      }
    }
    for (int j = n; j < kDecodeTile; ++j) {
      k_rows[j] = k_rows[0];
      v_rows[j] = v_rows[0];
    }
    const int64_t t1 = t0 + kDecodeTile;
    const int n1 =
        prefetch_next || request_i8 ? static_cast<int>(std::clamp<int64_t>(dq.context_len - t1, 0, kDecodeTile)) : 0;
    for (int j = 0; j < n1; ++j) {
      const int64_t slot = slot_of(dq.table, dq.block_size, t1 + j);
      if (prefetch_next) {
        k_next[j] = rows_at(kv.k, slot);
        v_next[j] = rows_at(kv.v, slot);
      } else {
        const int64_t at = slot * row + static_cast<int64_t>(dq.kv_begin) * hd;
        const int64_t scale_at = (slot * shape.num_kv_heads + dq.kv_begin) * groups;
        k8_next[j] = static_cast<const int8_t*>(kv.k) + at;
        v8_next[j] = static_cast<const int8_t*>(kv.v) + at;
        ks_next[j] = kv.k_scale + scale_at;
        vs_next[j] = kv.v_scale + scale_at;
      }
    }
    // The first tile was not requested ahead: each of its heads asks for the
    // next head's slice. In llama-110m's int4 decode at 1-65 positions (F32
    // rows, evicted by the weights' stream since the last token), attention
    // took a median 149 us a token against 171 without (eight alternating
    // pairs, 2-core Zen 4); 64 x 192 positions unchanged.
    const int n0 = prefetch_next && t0 == dq.first_pos ? n : 0;
    // Its own fixed-length loop, not request_lines: with request_lines here,
    // GCC 12 left no prefetch instruction in the F16 and F32 instantiations
    // (objdump: 144 prefetcht1 in the whole plugin file against 1802) and
    // 64 x 192 F16 ran twice as long. Check the count when this changes.
    auto request = [&](const E* const* k_at, const E* const* v_at, int count, uint32_t h) {
      for (int j = 0; j < count; ++j) {
        const char* kp = reinterpret_cast<const char*>(k_at[j] + h * hd);
        const char* vp = reinterpret_cast<const char*>(v_at[j] + h * hd);
        for (int64_t o = 0; o < hd * static_cast<int64_t>(sizeof(E)); o += 64) {
          _mm_prefetch(kp + o, _MM_HINT_T1);
          _mm_prefetch(vp + o, _MM_HINT_T1);
        }
      }
    };
    for (uint32_t h = 0; h < num_kv; ++h) {
      if (h + 1 < num_kv) request(k_rows, v_rows, n0, h + 1);
      if (prefetch_next) {
        request(k_next, v_next, n1, h);
      } else {
        for (int j = 0; j < n1; ++j) {
          request_lines(k8_next[j] + h * hd, hd);
          request_lines(v8_next[j] + h * hd, hd);
          request_lines(ks_next[j] + h * groups, groups * static_cast<int64_t>(sizeof(float)));
          request_lines(vs_next[j] + h * groups, groups * static_cast<int64_t>(sizeof(float)));
        }
      }
      for (uint32_t g = 0; g < dq.group; ++g) {
        const uint32_t qh = h * dq.group + g;
        tile(q + qh * hd, k_rows, v_rows, h * hd, n, dq.scale, s.m[qh], s.l[qh], s.acc + qh * hd);
      }
    }
  }
  finish_state(dq, s, heads, hd);
}

// One tile as the whole-row kernels see it: rows k[j] and v[j] (j < n)
// start at the range's first KV head; query heads [0, heads) of the range,
// group of them per KV head; part and p are the scratch's.
template <class E>
struct RowsTile {
  const float* q;
  const E* const* k;
  const E* const* v;
  int n;
  uint32_t num_kv, group, heads;
  float scale;
  float* part;  // [heads, kDecodeTile, 16] partial dot products
  float* p;     // [heads, kDecodeTile] the tile's softmax weights
  float* alpha;  // [heads] the accumulators' correction for this tile
  const E* const* k_next;  // the next tile's K rows (n_next of them), requested while this one's values are summed
  int n_next;
  int64_t row_bytes;  // bytes of one row of the range
};

// Part i of n of count items (their bounds, in order).
inline int share(int count, uint32_t i, uint32_t n) { return static_cast<int>(count * static_cast<int64_t>(i) / n); }

// Asks for [p, p + bytes) to be brought into L2, line by line.
inline void request_range(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
}

// True when a query's rows are read whole: every KV head of the slot, from
// an F32 or F16 cache (I8 rows are dequantized into the scratch tile first).
// Then each tile's K rows are read row after row at ascending addresses,
// which the hardware prefetchers follow, while its V rows are requested the
// same way; read head by head, the same rows are 2 x 16 short strided
// streams per tile. A throwaway probe on a 2-core Zen 4 (plain reads of a
// 12 x 64-head F32 cache from memory, 784 and 4096 positions, two threads):
// whole rows in order 30-53 GB/s, the same rows head by head 13-18, 19-24
// with the next tile requested ahead.
// bench_attention_cpu, 2-core Zen 4, per-head tiles against whole-row tiles
// (values from cache, head by head), two alternating pairs, ms a layer:
// 64 x 1024 F16 12 x 64 heads 11.7, 10.5 -> 9.1, 8.5; the same GQA 32/4
// 9.4, 8.6 -> 8.1, 8.2; from memory (--cold 1) 32 x 200 F16 1.14, 1.05 ->
// 0.86, 0.86; 8 x 784 F32 1.78, 1.35 -> 1.46, 1.64; one sequence at 2048
// F32 (spans) 0.66, 0.64 -> 0.48, 0.60. Two earlier forms measured
// against these: without any requests, whole rows were slower than per-head
// tiles (8 x 256 F16 0.61, 0.40 against 0.46, 0.32 ms); with the values
// summed four rows at a time from memory order (accumulators in memory),
// GQA 32/4 was slower (10.3, 9.2 against 8.6, 8.9 ms).
inline bool whole_rows(const KvShape& shape, const DecodeQuery& dq) {
  return !shape.int8 && dq.kv_begin == 0 && dq.kv_end == shape.num_kv_heads;
}

// decode_query for whole rows: per tile, rows_tile(RowsTile, m, l, acc)
// does every head of the range (the ISA's tile_rows), which also requests
// the tile's values while it reads the keys and the next tile's keys while
// it sums the values.
template <int NV, class E, class RowsKernel>
void decode_rows(const llmk_kv_layer& kv, const KvShape& shape, const DecodeQuery& dq, DecodeScratch& s,
                 const RowsKernel& rows_tile) {
  constexpr int64_t hd = 16 * NV;
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * hd;
  const uint32_t num_kv = dq.kv_end - dq.kv_begin;
  const uint32_t heads = num_kv * dq.group;
  start_state(s, heads, hd);
  const E* k_rows[kDecodeTile];
  const E* v_rows[kDecodeTile];
  const E* k_next[kDecodeTile];
  RowsTile<E> t{dq.q + static_cast<int64_t>(dq.kv_begin) * dq.group * hd, k_rows, v_rows, 0, num_kv, dq.group,
                heads, dq.scale, s.part, s.p, s.alpha, k_next, 0,
                static_cast<int64_t>(num_kv) * hd * static_cast<int64_t>(sizeof(E))};
  auto rows_of = [&](const void* base, int64_t pos) {
    return static_cast<const E*>(base) + slot_of(dq.table, dq.block_size, pos) * row +
           static_cast<int64_t>(dq.kv_begin) * hd;
  };
  for (int64_t t0 = dq.first_pos; t0 < dq.context_len; t0 += kDecodeTile) {
    t.n = static_cast<int>(std::min<int64_t>(kDecodeTile, dq.context_len - t0));
    for (int j = 0; j < t.n; ++j) {
      k_rows[j] = rows_of(kv.k, t0 + j);
      v_rows[j] = rows_of(kv.v, t0 + j);
    }
    t.n_next = static_cast<int>(std::clamp<int64_t>(dq.context_len - t0 - kDecodeTile, 0, kDecodeTile));
    for (int j = 0; j < t.n_next; ++j) k_next[j] = rows_of(kv.k, t0 + kDecodeTile + j);
    rows_tile(t, s.m, s.l, s.acc);
  }
  finish_state(dq, s, heads, hd);
}

// Calls decode(std::integral_constant<int, head_dim / 16>{}) for a head_dim
// decode_supports() accepts.
template <class Decode>
void for_head_dim(int head_dim, const Decode& decode) {
  switch (head_dim / 16) {
    case 1: decode(std::integral_constant<int, 1>{}); break;
    case 2: decode(std::integral_constant<int, 2>{}); break;
    case 3: decode(std::integral_constant<int, 3>{}); break;
    case 4: decode(std::integral_constant<int, 4>{}); break;
    case 5: decode(std::integral_constant<int, 5>{}); break;
    case 6: decode(std::integral_constant<int, 6>{}); break;
    case 7: decode(std::integral_constant<int, 7>{}); break;
    case 8: decode(std::integral_constant<int, 8>{}); break;
    case 16: decode(std::integral_constant<int, 16>{}); break;
    default: break;  // decode_supports() said no
  }
}

}  // namespace llmk::attention_cpu::decode_driver
