// Internals of the GGUF-native linear kernels (kernels/cpu/linear_gguf.hpp),
// shared by linear_gguf.cpp (dispatch, the 32-value types) and
// linear_gguf_k.cpp (the 256-value K types).
//
// A weight row is a sequence of units: a K type's unit is one 256-value
// block as the file stores it; a 32-value type's unit is a pair of blocks
// (64 values) regrouped by gguf_pack. Each activation row is rounded once per
// call into records of the same units (layouts below), and one pass then
// multiplies every weight unit with every activation record: a thread takes
// chunks of kChunkRows weight rows; within a chunk, each tile of up to
// kTileRowsMax activation rows meets each weight row, so a weight unit is
// decoded once per tile and its bytes come from the cache after the first
// tile. On AVX-512 VNNI a tile meets the weight rows one slice of the k
// dimension at a time (kSliceTileBytes of its records, read from L1 by
// every weight row), so the records themselves are read about once per
// chunk and may come from L2 or L3. Many rows go in blocks of up to
// kActBlockBytes of records, one pass over the weights per block.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LLMK_GGUF_VNNI 1
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLMK_GGUF_AVX2 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/linear_gguf.hpp"
#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/work_shares.hpp"

namespace llmk::kernels::cpu::gguf {

// Activation record of a K type, per 256 values (kKActBytes):
//   i8 q[256]    the rounded values, in the weight's order (Q4_K and Q5_K:
//                sub-blocks 0 2 1 3 4 6 5 7, 32 values each; Q6_K: natural)
//   i16 sums[32] Q4_K, Q5_K: sum of q over sub-block s (natural order) at s;
//                Q6_K: the sum over each 16 values; zero past them
//   f32 d        the scale: value = d * q
constexpr int64_t kKActBytes = 384;
constexpr int64_t kKActSums = 256;
constexpr int64_t kKActScale = 320;

// Activation record of a 32-value type, per 64 values (two blocks,
// kPairActBytes); a missing second block (odd block count) is all zero:
//   i8 q[64]       the rounded values (AVX-512 VNNI: q + 128, unsigned)
//   i32 init[16]   -offset * (sum of q over each 4 values): the integer dot
//                  product's start, so that it sums (w - offset) * q for
//                  weights stored with an offset (Q8_0 +128, Q4_0 8, Q5_0 16);
//                  zero on AVX-512 VNNI, where the weights carry it
//   f32 d[16]      each block's scale at its 8 lanes (f16-rounded)
//   f32 ds[16]     Q4_1, Q5_1: f16(d * sum of the block's q) at lanes 0 and 8
constexpr int64_t kPairActBytes = 256;
constexpr int64_t kPairActInit = 64;
constexpr int64_t kPairActScale = 128;
constexpr int64_t kPairActSum = 192;

constexpr int kChunkRows = 16;  // weight rows per work item (AccOps sums 16 outputs at once)
// Activation records per pass. With slices (AVX-512 VNNI) the records are
// read about once per chunk and need not stay in L2; without, they stay in
// a core's L2 share.
#if defined(LLMK_GGUF_VNNI)
constexpr int64_t kActBlockBytes = int64_t{1} << 20;
#else
constexpr int64_t kActBlockBytes = int64_t{384} << 10;
#endif

inline bool is_k_type(GgufQuant t) { return t == GgufQuant::q4_k || t == GgufQuant::q5_k || t == GgufQuant::q6_k; }

// Bytes of one packed unit (a 256-value block, or a pair of 32-value blocks).
size_t unit_bytes(GgufQuant t);
// Units per row and bytes of one rounded activation row.
inline int64_t num_units(GgufQuant t, int64_t in_features) {
  return is_k_type(t) ? in_features / 256 : (in_features / 32 + 1) / 2;
}
inline int64_t act_row_bytes(GgufQuant t, int64_t in_features) {
  return num_units(t, in_features) * (is_k_type(t) ? kKActBytes : kPairActBytes);
}

// Rounds x: [num_rows, in_features] into records (act_row_bytes per row).
void round_rows_k(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, uint8_t* act, int num_threads);
void round_rows_pairs(GgufQuant t, const float* x, int64_t num_rows, int64_t in_features, uint8_t* act,
                      int num_threads);

// y[num_rows, out_features] from the records and the packed weight.
void pass_k(GgufQuant t, const uint8_t* act, int64_t num_rows, int64_t in_features, const uint8_t* packed,
            int64_t out_features, float* y, int num_threads);
void pass_pairs(GgufQuant t, const uint8_t* act, int64_t num_rows, int64_t in_features, const uint8_t* packed,
                int64_t out_features, float* y, int num_threads);

#if defined(LLMK_GGUF_VNNI)
struct AccOps {
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  // y[j] = the sum of v[j]'s lanes for j < count, by one transposing tree
  // of adds for all 16 (each sum added in the same order wherever its row).
  static void store_sums(const Acc* v, int count, float* y) {
    __m512 w[8], x[4], z[2];
    LLMK_UNROLL for (int k = 0; k < 8; ++k)  // per 128 bits: rows 2k, 2k+1 in pairs of lanes
      w[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    LLMK_UNROLL for (int k = 0; k < 4; ++k) {  // per 128 bits: rows 4k..4k+3, one lane each
      const __m512d a = _mm512_castps_pd(w[2 * k]), b = _mm512_castps_pd(w[2 * k + 1]);
      x[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    LLMK_UNROLL for (int k = 0; k < 2; ++k)  // the four 128-bit parts of each x added in pairs
      z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0x88),
                           _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], 0xdd));
    const __m512 r = _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd));
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << count) - 1), r);
  }
};
#elif defined(LLMK_GGUF_AVX2)
struct AccOps {
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static void store_sums(const Acc* v, int count, float* y) {
    for (int j = 0; j < count; ++j) {
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(v[j]), _mm256_extractf128_ps(v[j], 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      y[j] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
  }
};
#else
struct AccOps {
  using Acc = float;
  static Acc zero() { return 0.0f; }
  static void store_sums(const Acc* v, int count, float* y) { std::copy(v, v + count, y); }
};
#endif

// A tile's records in one slice of the k dimension: every weight row of a
// chunk meets the tile's records slice by slice, so those it reads stay in
// L1 from one weight row to the next; a long row's whole records would not,
// and would come from L2 once per weight row. A tile of 8 rows takes 16
// pair units (1024 values) or 10 K blocks per slice; one row (decode), 128
// or 85, so a weight row streams in one piece. The AVX2 and portable paths
// take whole rows (0: no slices): they are bound by their arithmetic, and
// with slices GCC kept the AVX2 K types' accumulators on the stack
// (measured: Q4_K 17% slower).
#if defined(LLMK_GGUF_VNNI)
constexpr int64_t kSliceTileBytes = int64_t{32} << 10;
#else
constexpr int64_t kSliceTileBytes = 0;
#endif

// Weight rows [0, num_w) (num_w <= kChunkRows, row_bytes apart), units
// [0, units) from w, against R activation rows from act: T::load decodes a
// unit, T::dot adds its product with one record into the accumulator
// out[r][n] (zero at First). A function of its own per instantiation, so
// that GCC allocates each loop's registers apart (inlined twice per tile
// height, the K types' loops ran up to 5% slower).
template <class T, int R, bool First>
[[gnu::noinline]] void slice_rows(const uint8_t* w, int64_t row_bytes, int num_w, int64_t units, const uint8_t* act,
                                  int64_t act_stride, typename AccOps::Acc (&out)[R][kChunkRows]) {
  for (int n = 0; n < num_w; ++n) {
    typename AccOps::Acc acc[R];
    LLMK_UNROLL for (int r = 0; r < R; ++r) acc[r] = First ? AccOps::zero() : out[r][n];
    for (int64_t u = 0; u < units; ++u) {
      const typename T::Unit wu = T::load(w + n * row_bytes + u * T::kUnitBytes);
      LLMK_UNROLL for (int r = 0; r < R; ++r) T::dot(wu, act + r * act_stride + u * T::kActBytes, acc[r]);
    }
    LLMK_UNROLL for (int r = 0; r < R; ++r) out[r][n] = acc[r];
  }
}

// Weight rows [0, num_w) against R activation rows, slice by slice; each
// output's lanes are summed at the end. An accumulator goes on from slice to
// slice, so the sums are those of one unbroken loop over the units.
template <class T, int R>
[[gnu::always_inline]] inline void tile_rows(const uint8_t* w, int64_t row_bytes, int num_w, int64_t units,
                                             const uint8_t* act, int64_t act_stride, float* y, int64_t ldy) {
  typename AccOps::Acc out[R][kChunkRows];
  if constexpr (kSliceTileBytes == 0) {
    slice_rows<T, R, true>(w, row_bytes, num_w, units, act, act_stride, out);
  } else {
    constexpr int64_t kSliceUnits = std::max<int64_t>(1, kSliceTileBytes / (R * T::kActBytes));
    slice_rows<T, R, true>(w, row_bytes, num_w, std::min(units, kSliceUnits), act, act_stride, out);
    for (int64_t u0 = kSliceUnits; u0 < units; u0 += kSliceUnits)
      slice_rows<T, R, false>(w + u0 * T::kUnitBytes, row_bytes, num_w, std::min(units - u0, kSliceUnits),
                              act + u0 * T::kActBytes, act_stride, out);
  }
  for (int n = num_w; n < kChunkRows; ++n)  // store_sums reads all 16
    LLMK_UNROLL for (int r = 0; r < R; ++r) out[r][n] = AccOps::zero();
  LLMK_UNROLL for (int r = 0; r < R; ++r) AccOps::store_sums(out[r], num_w, y + r * ldy);
}

// Row tiles of at most kTileRowsMax rows, as even as they go
// (kernels/cpu/linear_tile.hpp): a weight unit is decoded once per tile.
constexpr int kTileRowsMax = 8;
template <class Tile>
[[gnu::always_inline]] inline void for_tiles(int64_t num_rows, const Tile& tile) {
  for_tiles_of_at_most<kTileRowsMax>(num_rows, tile);
}

// The whole pass of one type (see the top of this file).
template <class T>
void run_pass(const uint8_t* act, int64_t num_rows, int64_t units, const uint8_t* packed, int64_t out_features,
              float* y, int num_threads) {
  const int64_t act_stride = units * T::kActBytes, row_bytes = units * T::kUnitBytes;
  const int64_t num_chunks = (out_features + kChunkRows - 1) / kChunkRows;
  const int64_t block_rows = std::max<int64_t>(kTileRowsMax, kActBlockBytes / act_stride);
  const int64_t num_blocks = (num_rows + block_rows - 1) / block_rows;
  for (int64_t b = 0; b < num_blocks; ++b) {  // as even as they go
    const int64_t m0 = num_rows * b / num_blocks, rows_b = num_rows * (b + 1) / num_blocks - m0;
    for_each_item(num_chunks, num_threads, [&](int64_t c, int) {
      const int64_t n0 = c * kChunkRows, n1 = std::min<int64_t>(out_features, n0 + kChunkRows);
      for_tiles(rows_b, [&](auto rows, int64_t m) {
        constexpr int R = decltype(rows)::value;
        tile_rows<T, R>(packed + n0 * row_bytes, row_bytes, static_cast<int>(n1 - n0), units,
                        act + (m0 + m) * act_stride, act_stride, y + (m0 + m) * out_features + n0, out_features);
      });
    });
  }
}

}  // namespace llmk::kernels::cpu::gguf
