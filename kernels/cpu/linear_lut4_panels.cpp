// linear_lut4's int8 path on 16-channel panels (linear_lut4_panels.hpp):
// repacking, the rows' rounding (linear_w4's int8 rows per 32 inputs, the
// scale kept as f16), and the AVX-512 VNNI, AVX2 and portable panel passes.
#include "kernels/cpu/linear_lut4_panels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_lut4_impl.hpp"
#include "kernels/cpu/linear_panels16.hpp"
#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/linear_w4_a8.hpp"
#include "kernels/cpu/vec_math.hpp"  // <immintrin.h> at the level's ISA
#include "kernels/cpu/work_shares.hpp"

namespace llmk::kernels::cpu {

namespace {

int64_t num_octets(const Lut4Shape& s) { return s.k32() / 8; }
// One thread's decoded panel (the VNNI many-row pass), a multiple of 64 bytes.
size_t decoded_bytes(const Lut4Shape& s) { return static_cast<size_t>(num_octets(s) * 128); }
int64_t scale_width(const Lut4Shape& s) { return s.f16_scales() ? 2 : 4; }

// The rows' rounding: linear_w4's int8 rows in groups of 32 over k32 inputs.
W4Shape row_shape(const Lut4Shape& s) { return W4Shape{s.k32(), s.out_features, 32}; }

const int8_t* levels_of(Lut4Book book) { return book == Lut4Book::nf4 ? lut4::kNf4Levels : lut4::kIq4NlLevels; }

// Level + 127 as unsigned bytes (0..254): the VNNI path's table.
constexpr int kLevelOffset = 127;

// Input k of a rounded row (quads: even inputs of octet o in quads[2o], odd in quads[2o + 1]).
inline int32_t row_q_at(const W4RowA8& r, int64_t k) {
  const auto quad = static_cast<uint32_t>(r.quads[2 * (k / 8) + (k % 2)]);
  return static_cast<int8_t>(quad >> (8 * ((k % 8) / 2)));
}

// Portable: channel n of one row, blocks in order, 32 inputs at a time, as the vector passes scale them.
float portable_channel(const W4RowA8& r, const Lut4Shape& s, const int8_t* levels, float unit, const uint8_t* panels,
                       int64_t n) {
  const int64_t chunks = s.k32() / 32, per_block = s.f16_scales() ? 1 : s.block_size / 32;
  float total = 0.0f;
  for (int64_t b = 0, c = 0; b < s.num_blocks(); ++b) {
    float bt = 0.0f;
    for (const int64_t c1 = std::min(chunks, c + per_block); c < c1; ++c) {
      int32_t sum = 0;
      for (int64_t k = 32 * c; k < 32 * c + 32; ++k) sum += levels[lut4_panels_index_at(panels, s, n, k)] * row_q_at(r, k);
      bt = std::fma(static_cast<float>(sum), r.x_scale[c], bt);
    }
    total = std::fma(bt, lut4_panels_scale_at(panels, s, n, b * s.block_size), total);
  }
  return total * unit;
}

#if defined(__AVX2__)

// How far ahead of its loads a pass asks for a panel's words (one octet of
// a panel is one 64-byte line): linear_w4's one-row distances.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int kPrefetchBytes = 4096;
#else
constexpr int kPrefetchBytes = 1024;
#endif

struct PanelPointers {
  const uint32_t* words;  // [k32 / 8][16]
  const uint8_t* scales;  // [num_blocks][16], f16 or f32
};

inline PanelPointers panel_at(const uint8_t* panels, const Lut4Shape& s, int64_t p) {
  return {reinterpret_cast<const uint32_t*>(panels) + p * num_octets(s) * kPanels16Width,
          panels + lut4_panels_index_bytes(s) + p * s.num_blocks() * kPanels16Width * scale_width(s)};
}

#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)

template <bool F16>
[[gnu::always_inline]] inline __m512 block_scales(const uint8_t* scales, int64_t b) {
  if constexpr (F16)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + b * kPanels16Width * 2)));
  else
    return _mm512_loadu_ps(reinterpret_cast<const float*>(scales) + b * kPanels16Width);
}

// One octet of a panel (16 channels x 8 inputs, one 512-bit vector) looked
// up: the even inputs' levels (low nibbles) and the odd ones' (high), + 127.
[[gnu::always_inline]] inline void lookup(const uint32_t* words, __m512i table, __m512i& even, __m512i& odd) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i w = _mm512_loadu_si512(words);
  even = _mm512_shuffle_epi8(table, _mm512_and_si512(w, m4));
  odd = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(w, 4), m4));
}

// One row, one panel: per 32 inputs the four octets' sums in four
// accumulators (two vpdpbusd each: eight in flight), the first started at
// -127 times the activations' sum.
template <bool F16>
void row_panel(const W4RowA8& r, const Lut4Shape& s, const PanelPointers& pp, __m512i table, float unit,
               int64_t num_cols, float* y) {
  const int64_t chunks = s.k32() / 32, per_block = F16 ? 1 : s.block_size / 32;
  __m512 total = _mm512_setzero_ps();
  for (int64_t b = 0, c = 0; b < s.num_blocks(); ++b) {
    __m512 bt = _mm512_setzero_ps();
    for (const int64_t c1 = std::min(chunks, c + per_block); c < c1; ++c) {
      __m512i acc[4];
      LLMK_UNROLL for (int j = 0; j < 4; ++j) {
        const int64_t o = 4 * c + j;
        const uint32_t* words = pp.words + o * kPanels16Width;
        _mm_prefetch(reinterpret_cast<const char*>(words) + kPrefetchBytes, _MM_HINT_T0);
        __m512i even, odd;
        lookup(words, table, even, odd);
        const __m512i start = j == 0 ? _mm512_set1_epi32(r.x_sum[c]) : _mm512_setzero_si512();
        acc[j] = _mm512_dpbusd_epi32(start, even, _mm512_set1_epi32(r.quads[2 * o]));
        acc[j] = _mm512_dpbusd_epi32(acc[j], odd, _mm512_set1_epi32(r.quads[2 * o + 1]));
      }
      const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3]));
      bt = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(r.x_scale[c]), bt);
    }
    total = _mm512_fmadd_ps(bt, block_scales<F16>(pp.scales, b), total);
  }
  _mm512_mask_storeu_ps(y, tail_mask(num_cols), _mm512_mul_ps(total, _mm512_set1_ps(unit)));
}

// The panel's levels + 127, looked up once for every row tile of a many-row
// pass: per octet the even inputs' 64 bytes, then the odd ones'.
void decode_panel(const Lut4Shape& s, const PanelPointers& pp, __m512i table, uint8_t* out) {
  for (int64_t o = 0; o < num_octets(s); ++o) {
    __m512i even, odd;
    lookup(pp.words + o * kPanels16Width, table, even, odd);
    _mm512_store_si512(out + 128 * o, even);
    _mm512_store_si512(out + 128 * o + 64, odd);
  }
}

// R rows, one panel decoded by decode_panel: two vpdpbusd per row and octet
// (even and odd inputs in accumulators of their own); the same integer sums
// and the same f32 steps as row_panel, so a row's outputs are its bits.
template <int R, bool F16>
void rows_panel(const W4RowA8* rows, const Lut4Shape& s, const PanelPointers& pp, const uint8_t* decoded, float unit,
                int64_t num_cols, float* y, int64_t ldy) {
  const int64_t chunks = s.k32() / 32, per_block = F16 ? 1 : s.block_size / 32;
  __m512 total[R];
  LLMK_UNROLL for (int m = 0; m < R; ++m) total[m] = _mm512_setzero_ps();
  for (int64_t b = 0, c = 0; b < s.num_blocks(); ++b) {
    __m512 bt[R];
    LLMK_UNROLL for (int m = 0; m < R; ++m) bt[m] = _mm512_setzero_ps();
    for (const int64_t c1 = std::min(chunks, c + per_block); c < c1; ++c) {
      __m512i lo[R], hi[R];
      LLMK_UNROLL for (int m = 0; m < R; ++m) {
        lo[m] = _mm512_set1_epi32(rows[m].x_sum[c]);
        hi[m] = _mm512_setzero_si512();
      }
      LLMK_UNROLL for (int j = 0; j < 4; ++j) {
        const int64_t o = 4 * c + j;
        const __m512i even = _mm512_load_si512(decoded + 128 * o), odd = _mm512_load_si512(decoded + 128 * o + 64);
        LLMK_UNROLL for (int m = 0; m < R; ++m) {
          lo[m] = _mm512_dpbusd_epi32(lo[m], even, _mm512_set1_epi32(rows[m].quads[2 * o]));
          hi[m] = _mm512_dpbusd_epi32(hi[m], odd, _mm512_set1_epi32(rows[m].quads[2 * o + 1]));
        }
      }
      LLMK_UNROLL for (int m = 0; m < R; ++m)
        bt[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo[m], hi[m])), _mm512_set1_ps(rows[m].x_scale[c]),
                                bt[m]);
    }
    const __m512 sw = block_scales<F16>(pp.scales, b);
    LLMK_UNROLL for (int m = 0; m < R; ++m) total[m] = _mm512_fmadd_ps(bt[m], sw, total[m]);
  }
  LLMK_UNROLL for (int m = 0; m < R; ++m)
    _mm512_mask_storeu_ps(y + m * ldy, tail_mask(num_cols), _mm512_mul_ps(total[m], _mm512_set1_ps(unit)));
}

struct Table {
  __m512i v;
  explicit Table(Lut4Book book) {
    alignas(16) uint8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(levels_of(book)[i] + kLevelOffset);
    v = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  }
};

#elif defined(__AVX2__)

template <bool F16>
[[gnu::always_inline]] inline __m256 block_scales(const uint8_t* scales, int64_t b, int h) {
  if constexpr (F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + (b * kPanels16Width + 8 * h) * 2)));
  else
    return _mm256_loadu_ps(reinterpret_cast<const float*>(scales) + b * kPanels16Width + 8 * h);
}

// R rows, one panel, 8 channels at a time: each octet's signed levels looked
// up once, then per row |level| times q with the level's sign (vpmaddubsw,
// |pair| <= 2 * 127 * 127) widened to s32 (vpmaddwd).
template <int R, bool F16>
void rows_panel(const W4RowA8* rows, const Lut4Shape& s, const PanelPointers& pp, __m256i table, float unit,
                int64_t num_cols, float* y, int64_t ldy) {
  const int64_t chunks = s.k32() / 32, per_block = F16 ? 1 : s.block_size / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256 total[R][2];
  LLMK_UNROLL for (int m = 0; m < R; ++m) total[m][0] = total[m][1] = _mm256_setzero_ps();
  for (int64_t b = 0, c = 0; b < s.num_blocks(); ++b) {
    __m256 bt[R][2];
    LLMK_UNROLL for (int m = 0; m < R; ++m) bt[m][0] = bt[m][1] = _mm256_setzero_ps();
    for (const int64_t c1 = std::min(chunks, c + per_block); c < c1; ++c) {
      __m256i acc[R][2];
      LLMK_UNROLL for (int m = 0; m < R; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
      for (int64_t o = 4 * c; o < 4 * c + 4; ++o) {
        const uint32_t* words = pp.words + o * kPanels16Width;
        _mm_prefetch(reinterpret_cast<const char*>(words) + kPrefetchBytes, _MM_HINT_T0);
        LLMK_UNROLL for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 8 * h));
          const __m256i even = _mm256_shuffle_epi8(table, _mm256_and_si256(w, m4));
          const __m256i odd = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
          const __m256i even_abs = _mm256_abs_epi8(even), odd_abs = _mm256_abs_epi8(odd);
          LLMK_UNROLL for (int m = 0; m < R; ++m) {
            const __m256i xe = _mm256_set1_epi32(rows[m].quads[2 * o]), xo = _mm256_set1_epi32(rows[m].quads[2 * o + 1]);
            const __m256i pe = _mm256_maddubs_epi16(even_abs, _mm256_sign_epi8(xe, even));
            const __m256i po = _mm256_maddubs_epi16(odd_abs, _mm256_sign_epi8(xo, odd));
            acc[m][h] = _mm256_add_epi32(acc[m][h], _mm256_add_epi32(_mm256_madd_epi16(pe, ones),
                                                                     _mm256_madd_epi16(po, ones)));
          }
        }
      }
      LLMK_UNROLL for (int m = 0; m < R; ++m) {
        const __m256 dx = _mm256_set1_ps(rows[m].x_scale[c]);
        LLMK_UNROLL for (int h = 0; h < 2; ++h) bt[m][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][h]), dx, bt[m][h]);
      }
    }
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256 sw = block_scales<F16>(pp.scales, b, h);
      LLMK_UNROLL for (int m = 0; m < R; ++m) total[m][h] = _mm256_fmadd_ps(bt[m][h], sw, total[m][h]);
    }
  }
  LLMK_UNROLL for (int m = 0; m < R; ++m) LLMK_UNROLL for (int h = 0; h < 2; ++h) {
    if (num_cols - 8 * h > 0) store8(y + m * ldy + 8 * h, _mm256_mul_ps(total[m][h], _mm256_set1_ps(unit)), num_cols - 8 * h);
  }
}

template <bool F16>
void row_panel(const W4RowA8& r, const Lut4Shape& s, const PanelPointers& pp, __m256i table, float unit,
               int64_t num_cols, float* y) {
  rows_panel<1, F16>(&r, s, pp, table, unit, num_cols, y, 0);
}

struct Table {
  __m256i v;
  explicit Table(Lut4Book book) {
    v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels_of(book))));
  }
};

#endif

#if defined(__AVX2__)
// The rows rounded in scratch (row_shape's records, back to back). Rows per
// pass over a panel: the VNNI pass keeps 4 accumulators a row in registers.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int kMaxRows = 6;
#else
constexpr int kMaxRows = 4;
#endif

template <bool F16>
void native_rows(float* scratch, uint8_t* decoded, int64_t num_rows, const Lut4Shape& s, Lut4Book book,
                 const uint8_t* panels, float* y, int num_threads) {
  const W4Shape rs = row_shape(s);
  const Table table(book);
  const float unit = lut4_codebook(book).unit;
  if (num_rows == 1) {
    const W4RowA8 r = row_a8_at(scratch, rs, 0);
    for_one_row_tiles(s.out_features, num_threads, [&](auto panels_in_tile, int64_t p0, int64_t num_cols, int64_t n0) {
      for (int c = 0; c < decltype(panels_in_tile)::value; ++c) {
        const int64_t cols = num_cols - c * kPanels16Width;
        if (cols <= 0) break;
        row_panel<F16>(r, s, panel_at(panels, s, p0 + c), table.v, unit, cols, y + n0 + c * kPanels16Width);
      }
    });
    return;
  }
  for_each_item(num_panels16(s.out_features), num_threads, [&](int64_t p, int thread) {
    const int64_t n0 = p * kPanels16Width, cols = std::min<int64_t>(kPanels16Width, s.out_features - n0);
    const PanelPointers pp = panel_at(panels, s, p);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    uint8_t* own = decoded + thread * decoded_bytes(s);
    decode_panel(s, pp, table.v, own);
    const auto& from = own;
#else
    const auto& from = table.v;
#endif
    for_tiles_of_at_most<kMaxRows>(num_rows, [&](auto rows_in_tile, int64_t m0) {
      constexpr int R = decltype(rows_in_tile)::value;
      W4RowA8 rows[R];
      for (int m = 0; m < R; ++m) rows[m] = row_a8_at(scratch, rs, m0 + m);
      rows_panel<R, F16>(rows, s, pp, from, unit, cols, y + m0 * s.out_features + n0, s.out_features);
    });
  });
}
#endif

}  // namespace

size_t lut4_panels_index_bytes(const Lut4Shape& s) {
  return static_cast<size_t>(num_panels16(s.out_features) * kPanels16Width * num_octets(s)) * sizeof(uint32_t);
}

size_t lut4_panels_scale_bytes(const Lut4Shape& s) {
  return static_cast<size_t>(num_panels16(s.out_features) * kPanels16Width * s.num_blocks() * scale_width(s));
}

void pack_lut4_panels(const uint8_t* packed, const Lut4Shape& s, uint8_t* panels, int num_threads) {
  const int64_t n_panels = num_panels16(s.out_features), octets = num_octets(s), nb = s.num_blocks();
  const int64_t width = scale_width(s), units = s.num_units();
  auto* words = reinterpret_cast<uint32_t*>(panels);
  uint8_t* scales = panels + lut4_panels_index_bytes(s);
  std::memset(panels, 0, lut4_panels_size(s));
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t p = 0; p < n_panels; ++p)
    for (int64_t l = 0; l < kPanels16Width; ++l) {
      const int64_t n = p * kPanels16Width + l;
      if (n >= s.out_features) continue;
      for (int64_t k = 0; k < s.in_features; ++k)
        words[(p * octets + k / 8) * kPanels16Width + l] |= uint32_t{lut4_index_at(packed, s, n, k)} << (4 * (k % 8));
      for (int64_t b = 0; b < nb; ++b) {
        // The stored bits: a unit's f16 of its first or second 32, or its block's f32.
        const int64_t k = b * s.block_size;
        const uint8_t* unit = packed + (n * units + k / 64) * kLut4UnitBytes;
        const uint8_t* from = s.f16_scales() ? unit + (k % 64 < 32 ? 0 : 2) : unit;
        std::memcpy(scales + ((p * nb + b) * kPanels16Width + l) * width, from, static_cast<size_t>(width));
      }
    }
}

uint8_t lut4_panels_index_at(const uint8_t* panels, const Lut4Shape& s, int64_t n, int64_t k) {
  const auto* words = reinterpret_cast<const uint32_t*>(panels);
  const uint32_t word = words[((n / kPanels16Width) * num_octets(s) + k / 8) * kPanels16Width + n % kPanels16Width];
  return static_cast<uint8_t>((word >> (4 * (k % 8))) & 15u);
}

float lut4_panels_scale_at(const uint8_t* panels, const Lut4Shape& s, int64_t n, int64_t k) {
  const uint8_t* at = panels + lut4_panels_index_bytes(s) +
                      (((n / kPanels16Width) * s.num_blocks() + k / s.block_size) * kPanels16Width + n % kPanels16Width) *
                          scale_width(s);
  if (s.f16_scales()) {
    uint16_t h;
    std::memcpy(&h, at, 2);
    return f16_to_f32(h);
  }
  float v;
  std::memcpy(&v, at, 4);
  return v;
}

// Every row's quads, scales and sums, then x padded to k32 where in_features
// is not a multiple of 32, then (more than one row) a decoded panel per thread.
namespace {
size_t rows_bytes(const Lut4Shape& s, int64_t num_rows) {
  const int64_t padded = s.k32() == s.in_features ? 0 : num_rows * s.k32();
  return (static_cast<size_t>(num_rows * w4a8_row_floats(row_shape(s)) + padded) * sizeof(float) + 63) / 64 * 64;
}
}  // namespace

size_t lut4_panels_scratch_size(const Lut4Shape& s, int64_t max_rows, int num_threads) {
  const int64_t rows = std::max<int64_t>(1, max_rows);
  return rows_bytes(s, rows) + (rows > 1 ? static_cast<size_t>(std::max(1, num_threads)) * decoded_bytes(s) : 0);
}

void linear_lut4_panels(const float* x, int64_t num_rows, const Lut4Shape& s, Lut4Book book, const uint8_t* panels,
                        float* y, void* scratch, int num_threads, Lut4Kernels kernels) {
  if (num_rows <= 0) return;
  const W4Shape rs = row_shape(s);
  auto* rows = static_cast<float*>(scratch);
  if (s.k32() != s.in_features) {
    float* xp = rows + num_rows * w4a8_row_floats(rs);
    for (int64_t m = 0; m < num_rows; ++m) {
      std::memcpy(xp + m * s.k32(), x + m * s.in_features, static_cast<size_t>(s.in_features) * sizeof(float));
      std::fill(xp + m * s.k32() + s.in_features, xp + (m + 1) * s.k32(), 0.0f);
    }
    x = xp;
  }
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1 && num_rows > 1) schedule(static)
  for (int64_t m = 0; m < num_rows; ++m) {
    const W4RowA8 r = row_a8_at(rows, rs, m);
    quantize_row_a8(x + m * s.k32(), rs, r);
    for (int64_t c = 0; c < rs.num_groups(); ++c) {
      r.x_scale[c] = f16_to_f32(f32_to_f16(r.x_scale[c]));
      r.x_sum[c] *= -kLevelOffset;  // what the VNNI sums of level + 127 take back out
    }
  }
#if defined(__AVX2__)
  if (kernels == Lut4Kernels::native) {
    uint8_t* decoded = static_cast<uint8_t*>(scratch) + rows_bytes(s, num_rows);
    if (s.f16_scales()) native_rows<true>(rows, decoded, num_rows, s, book, panels, y, num_threads);
    else native_rows<false>(rows, decoded, num_rows, s, book, panels, y, num_threads);
    return;
  }
#endif
  const int8_t* levels = levels_of(book);
  const float unit = lut4_codebook(book).unit;
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t n = 0; n < s.out_features; ++n)
    for (int64_t m = 0; m < num_rows; ++m)
      y[m * s.out_features + n] = portable_channel(row_a8_at(rows, rs, m), s, levels, unit, panels, n);
}

}  // namespace llmk::kernels::cpu
