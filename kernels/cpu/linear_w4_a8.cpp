// linear_w4's int8-activation path (linear_w4_a8.hpp): rounding rows of
// activations to int8 per group, one-row passes and row tiles per panel with
// AVX2, AVX512-VNNI or portable integer dot products.
#include "kernels/cpu/linear_w4_a8.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/linear_tile.hpp"
#include "kernels/cpu/vec_math.hpp"  // <immintrin.h> at the level's ISA
#include "kernels/cpu/work_shares.hpp"

namespace llmk::kernels::cpu {

int64_t w4a8_row_floats(const W4Shape& s) { return s.k_pad() / 4 + 2 * s.num_groups(); }

W4RowA8 row_a8_at(float* scratch, const W4Shape& s, int64_t m) {
  float* at = scratch + m * w4a8_row_floats(s);
  return {reinterpret_cast<int32_t*>(at), at + s.k_pad() / 4,
          reinterpret_cast<int32_t*>(at + s.k_pad() / 4 + s.num_groups())};
}

namespace {

// Octets [o_begin, o_end) of one group, rounded with scale inv, into r's
// quads; returns the sum of their xq. Inputs at or past k1 count as zero.
int32_t quantize_octets_a8(const float* x, int64_t k1, float inv, int64_t o_begin, int64_t o_end, const W4RowA8& r) {
  int32_t sum = 0;
  int64_t o = o_begin;
#if defined(__AVX2__)
  // Four whole octets at a time: cvtps rounds to nearest even as nearbyint
  // does in the default rounding mode, so the bytes match the loop below.
  // Each octet's eight ints are ordered evens then odds; the two packs then
  // leave, per 128-bit lane, the evens (lane 0) and the odds (lane 1) of the
  // four octets, which the last permute interleaves as quads[2o], quads[2o + 1].
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i even_odd = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i interleave = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i sums = _mm256_setzero_si256();
  for (; o + 4 <= o_end && 8 * (o + 4) <= k1; o += 4) {
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * (o + i)), vinv));
      sums = _mm256_add_epi32(sums, q[i]);
      q[i] = _mm256_permutevar8x32_epi32(q[i], even_odd);
    }
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.quads + 2 * o), _mm256_permutevar8x32_epi32(bytes, interleave));
  }
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1)));
#endif
  for (; o < o_end; ++o) {
    uint32_t even = 0, odd = 0;
    for (int b = 0; b < 4; ++b) {
      const int64_t ke = 8 * o + 2 * b, ko = ke + 1;
      const auto qe = static_cast<int8_t>(ke < k1 ? std::nearbyint(x[ke] * inv) : 0.0f);
      const auto qo = static_cast<int8_t>(ko < k1 ? std::nearbyint(x[ko] * inv) : 0.0f);
      sum += qe + qo;
      even |= static_cast<uint32_t>(static_cast<uint8_t>(qe)) << (8 * b);
      odd |= static_cast<uint32_t>(static_cast<uint8_t>(qo)) << (8 * b);
    }
    r.quads[2 * o] = static_cast<int32_t>(even);
    r.quads[2 * o + 1] = static_cast<int32_t>(odd);
  }
  return sum;
}


#if defined(__AVX2__)

// The first min(cols, 8) floats of v to p (cols > 0); AVX-512 builds take this path too.
inline void store_first8(float* p, __m256 v, int64_t cols) {
  if (cols >= 8) return _mm256_storeu_ps(p, v);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(cols)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(p, mask, v);
}

// VNNI (AVX512-VNNI with VL, the avx512bf16 level): vpdpbusd multiplies
// u8 x s8 byte pairs and adds each lane's four products straight into s32,
// which on AVX2 takes vpmaddubsw, vpaddw, vpmaddwd and vpaddd. Both give the
// exact integer sums, so a row's outputs are the same bits on every level.
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LLMK_W4_VNNI 1
constexpr bool kW4Vnni = true;
#else
constexpr bool kW4Vnni = false;

// acc + per 32-bit lane the products of the low nibbles with xe and the high
// nibbles with xo (four byte pairs each), without VNNI.
inline __m256i add_nibble_dots(__m256i acc, __m256i lo, __m256i hi, __m256i xe, __m256i xo) {
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#endif

// How far ahead of its loads a one-row pass asks for each panel's words: one
// octet of a panel is one 64-byte line. Measured with all of llama-110m's
// int4 GEMVs in turn (interleaved runs): on a 2-core Zen 3 (AVX2), 1 KiB was
// 8-9% faster than the hardware prefetcher alone (512 bytes half that, 2 KiB
// the same); on a 2-core Zen 4 (VNNI, weights in stream memory) the pass with
// no request ahead took 1.65-1.9 ms, 1 KiB 1.47-1.66 ms, 2-8 KiB 1.33-1.6 ms,
// 4 KiB the best in most rounds (a noisy machine). Each keeps its own.
constexpr int kW4PrefetchBytes = kW4Vnni ? 4096 : 1024;

// One group of one panel (16 channels) of one row with VNNI: per octet and
// 8 channels, vpdpbusd adds the low nibbles times the even activation quads
// into one accumulator, and the high nibbles left in place (16 times their
// value, masked with 0xf0) times the odd quads into another; the second sum
// is an exact multiple of 16 and is shifted back once per group. Two octets
// in flight, each with its own four accumulators: eight independent chains,
// where one accumulator per 8 channels waits on vpdpbusd's latency twice per
// octet (4 cycles each on a Zen 4: at most about 30 GB/s per core). On a
// 2-core Zen 4, one llama-110m layer's int4 GEMVs with the weights in cache
// ran at 85-100 GB/s against 62-71 GB/s with the one chain per 8 channels.
// |sums| stay below 2^31 for any in_features below 140000 (16 * 15 * 127 * 4
// per lane and octet).
inline void group_dots_vnni(const W4RowA8& r, const uint32_t* panel, int64_t o_begin, int64_t o_end, __m256i acc[2]) {
#if defined(LLMK_W4_VNNI)
  const __m256i low = _mm256_set1_epi8(0x0f), high = _mm256_set1_epi8(static_cast<char>(0xf0));
  __m256i lo[2][2], hi[2][2];  // [octet parity][8-channel half]
  LLMK_UNROLL for (int u = 0; u < 2; ++u) LLMK_UNROLL for (int h = 0; h < 2; ++h) lo[u][h] = hi[u][h] = _mm256_setzero_si256();
  auto octet = [&](int u, int64_t o) {
    const __m256i xe = _mm256_set1_epi32(r.quads[2 * o]), xo = _mm256_set1_epi32(r.quads[2 * o + 1]);
    const uint32_t* words = panel + o * kPanels16Width;
    _mm_prefetch(reinterpret_cast<const char*>(words) + kW4PrefetchBytes, _MM_HINT_T0);
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 8 * h));
      lo[u][h] = _mm256_dpbusd_epi32(lo[u][h], _mm256_and_si256(w, low), xe);
      hi[u][h] = _mm256_dpbusd_epi32(hi[u][h], _mm256_and_si256(w, high), xo);
    }
  };
  int64_t o = o_begin;
  for (; o + 2 <= o_end; o += 2) {
    octet(0, o);
    octet(1, o + 1);
  }
  if (o < o_end) octet(0, o);
  LLMK_UNROLL for (int h = 0; h < 2; ++h)
    acc[h] = _mm256_add_epi32(_mm256_add_epi32(lo[0][h], lo[1][h]),
                              _mm256_srai_epi32(_mm256_add_epi32(hi[0][h], hi[1][h]), 4));
#else
  (void)r, (void)panel, (void)o_begin, (void)o_end, (void)acc;
#endif
}

// One panel (16 channels) of one row. Without VNNI, per octet and 8
// channels: the low and high nibbles of each byte times the even and odd
// activation quads (vpmaddubsw: u8 x s8 pairs into s16, |sum| <= 2 * 15 *
// 127), the two summed in s16 for up to 4 octets (|sum| <= 30480), then
// widened to s32 (vpmaddwd with ones); with VNNI, group_dots_vnni. Per group
// the exact s32 sum is scaled in f32. One panel at a time: two panels
// interleaved (two weight streams, twice the accumulators) decoded 10-20%
// slower on a 2-core Zen 3 (AVX2, llama-110m, alternating runs).
void gemv_pass_w4a8(const W4RowA8& r, const W4Shape& s, const uint32_t* packed, const float* scale,
                    const uint8_t* zero, int64_t p, int64_t num_cols, float* y) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const __m256i nibbles = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const uint32_t* panel = packed + p * num_octets * kPanels16Width;
  __m256 total[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t o_end = s.group_octet_end(g);
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    if constexpr (kW4Vnni) {
      group_dots_vnni(r, panel, o_begin, o_end, acc);
    } else {
      for (int64_t o0 = o_begin; o0 < o_end; o0 += 4) {
        __m256i sum16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        const int64_t o1 = std::min(o_end, o0 + 4);
        for (int64_t o = o0; o < o1; ++o) {
          const __m256i xe = _mm256_set1_epi32(r.quads[2 * o]), xo = _mm256_set1_epi32(r.quads[2 * o + 1]);
          const uint32_t* words = panel + o * kPanels16Width;
          _mm_prefetch(reinterpret_cast<const char*>(words) + kW4PrefetchBytes, _MM_HINT_T0);
          LLMK_UNROLL for (int h = 0; h < 2; ++h) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 8 * h));
            const __m256i lo = _mm256_and_si256(w, nibbles);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibbles);
            sum16[h] = _mm256_add_epi16(sum16[h],
                                        _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo)));
          }
        }
        LLMK_UNROLL for (int h = 0; h < 2; ++h) acc[h] = _mm256_add_epi32(acc[h], _mm256_madd_epi16(sum16[h], ones));
      }
    }
    const __m256 sx = _mm256_set1_ps(r.x_scale[g]);
    const __m256 xsum = _mm256_set1_ps(static_cast<float>(r.x_sum[g]));
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const int64_t at = (p * num_groups + g) * kPanels16Width + 8 * h;
      const __m256 z =
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + at))));
      const __m256 dot = _mm256_fnmadd_ps(z, xsum, _mm256_cvtepi32_ps(acc[h]));  // exact below 2^24
      total[h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(scale + at), sx), dot, total[h]);
    }
  }
  LLMK_UNROLL for (int h = 0; h < 2; ++h) {
    const int64_t cols = num_cols - 8 * h;
    if (cols > 0) store_first8(y + 8 * h, total[h], cols);
  }
}

template <int C>
void gemv_tile_w4a8(const W4RowA8& r, const W4Shape& s, const uint32_t* packed, const float* scale,
                    const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  for (int c = 0; c < C; ++c) {
    const int64_t cols = num_cols - c * kPanels16Width;
    if (cols <= 0) break;
    gemv_pass_w4a8(r, s, packed, scale, zero, p0 + c, cols, y + c * kPanels16Width);
  }
}

// R rows (R <= 4) x one panel (16 channels): the same integer sums per group
// as the one-row pass, each row against its own activation quads, and the
// same f32 epilogue in the same group order, so a row's outputs are the same
// bits in a decode step and in a prefill. Each octet's nibbles are unpacked
// once for all R rows.
#if defined(LLMK_W4_VNNI)
// With AVX512-VNNI, one octet of a panel is one 512-bit vector: vpdpbusd on
// it does twice the work of two 256-bit ones at one instruction (on a Zen 4,
// 3.6 G of the 512-bit form a second per core against 4.5 G of the 256-bit
// one, measured with eight independent chains). The high nibbles stay in
// place (16 times their value) in accumulators of their own, as in the
// one-row pass. The group epilogue is the 256-bit one's, lane for lane.
template <int R>
void rows_panel_w4a8(const W4RowA8* rows, const W4Shape& s, const uint32_t* packed, const float* scale,
                     const uint8_t* zero, int64_t p, int64_t num_cols, float* y, int64_t ldy) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8(static_cast<char>(0xf0));
  __m512 total[R];
  LLMK_UNROLL for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  const uint32_t* panel = packed + p * num_octets * kPanels16Width;
  for (int64_t g = 0; g < num_groups; ++g) {
    __m512i lo[R], hi[R];
    LLMK_UNROLL for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_si512();
    for (int64_t o = s.group_octet_begin(g); o < s.group_octet_end(g); ++o) {
      const __m512i w = _mm512_loadu_si512(panel + o * kPanels16Width);
      const __m512i wl = _mm512_and_si512(w, low), wh = _mm512_and_si512(w, high);
      LLMK_UNROLL for (int r = 0; r < R; ++r) {
        lo[r] = _mm512_dpbusd_epi32(lo[r], wl, _mm512_set1_epi32(rows[r].quads[2 * o]));
        hi[r] = _mm512_dpbusd_epi32(hi[r], wh, _mm512_set1_epi32(rows[r].quads[2 * o + 1]));
      }
    }
    const int64_t at = (p * num_groups + g) * kPanels16Width;
    const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zero + at))));
    const __m512 sc = _mm512_loadu_ps(scale + at);
    LLMK_UNROLL for (int r = 0; r < R; ++r) {
      const __m512i acc = _mm512_add_epi32(lo[r], _mm512_srai_epi32(hi[r], 4));
      const __m512 dot = _mm512_fnmadd_ps(z, _mm512_set1_ps(static_cast<float>(rows[r].x_sum[g])), _mm512_cvtepi32_ps(acc));
      total[r] = _mm512_fmadd_ps(_mm512_mul_ps(sc, _mm512_set1_ps(rows[r].x_scale[g])), dot, total[r]);
    }
  }
  const auto mask = static_cast<__mmask16>((1u << num_cols) - 1u);  // num_cols in [1, 16]
  LLMK_UNROLL for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy, mask, total[r]);
}
#else
template <int R>
void rows_panel_w4a8(const W4RowA8* rows, const W4Shape& s, const uint32_t* packed, const float* scale,
                     const uint8_t* zero, int64_t p, int64_t num_cols, float* y, int64_t ldy) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const __m256i nibbles = _mm256_set1_epi8(0x0f);
  alignas(32) float total[R][16] = {};
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t o_end = s.group_octet_end(g);
    __m256i acc[R][2];
    LLMK_UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int64_t o = o_begin; o < o_end; ++o) {
      const auto* wp = reinterpret_cast<const __m256i*>(packed + (p * num_octets + o) * kPanels16Width);
      const __m256i w0 = _mm256_loadu_si256(wp), w1 = _mm256_loadu_si256(wp + 1);
      const __m256i lo0 = _mm256_and_si256(w0, nibbles), hi0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), nibbles);
      const __m256i lo1 = _mm256_and_si256(w1, nibbles), hi1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), nibbles);
      LLMK_UNROLL for (int r = 0; r < R; ++r) {
        const __m256i xe = _mm256_set1_epi32(rows[r].quads[2 * o]), xo = _mm256_set1_epi32(rows[r].quads[2 * o + 1]);
        acc[r][0] = add_nibble_dots(acc[r][0], lo0, hi0, xe, xo);
        acc[r][1] = add_nibble_dots(acc[r][1], lo1, hi1, xe, xo);
      }
    }
    LLMK_UNROLL for (int h = 0; h < 2; ++h) {
      const int64_t at = (p * num_groups + g) * kPanels16Width + 8 * h;
      const __m256 z = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + at))));
      const __m256 sc = _mm256_loadu_ps(scale + at);
      LLMK_UNROLL for (int r = 0; r < R; ++r) {
        const __m256 dot = _mm256_fnmadd_ps(z, _mm256_set1_ps(static_cast<float>(rows[r].x_sum[g])),
                                            _mm256_cvtepi32_ps(acc[r][h]));
        const __m256 t = _mm256_fmadd_ps(_mm256_mul_ps(sc, _mm256_set1_ps(rows[r].x_scale[g])), dot,
                                         _mm256_load_ps(total[r] + 8 * h));
        _mm256_store_ps(total[r] + 8 * h, t);
      }
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(y + r * ldy, total[r], static_cast<size_t>(num_cols) * sizeof(float));
}
#endif

#else  // portable: the same integer sums and the same f32 scaling, one channel at a time

template <int C>
void gemv_tile_w4a8(const W4RowA8& r, const W4Shape& s, const uint32_t* packed, const float* scale,
                    const uint8_t* zero, int64_t p0, int64_t num_cols, float* y) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  for (int64_t n = 0; n < num_cols; ++n) {
    const int64_t p = p0 + n / kPanels16Width, l = n % kPanels16Width;
    float total = 0.0f;
    for (int64_t g = 0; g < num_groups; ++g) {
      const int64_t o_begin = s.group_octet_begin(g);
      const int64_t o_end = s.group_octet_end(g);
      int32_t dot = 0;
      for (int64_t o = o_begin; o < o_end; ++o) {
        const uint32_t word = packed[(p * num_octets + o) * kPanels16Width + l];
        const auto even = static_cast<uint32_t>(r.quads[2 * o]), odd = static_cast<uint32_t>(r.quads[2 * o + 1]);
        for (int b = 0; b < 4; ++b) {
          dot += static_cast<int32_t>((word >> (8 * b)) & 15u) * static_cast<int8_t>(even >> (8 * b));
          dot += static_cast<int32_t>((word >> (8 * b + 4)) & 15u) * static_cast<int8_t>(odd >> (8 * b));
        }
      }
      const int64_t at = (p * num_groups + g) * kPanels16Width + l;
      const float d = std::fma(-static_cast<float>(zero[at]), static_cast<float>(r.x_sum[g]), static_cast<float>(dot));
      total = std::fma(scale[at] * r.x_scale[g], d, total);
    }
    y[n] = total;
  }
}

#endif

}  // namespace

void quantize_row_a8(const float* x, const W4Shape& s, const W4RowA8& r) {
  for (int64_t g = 0; g < s.num_groups(); ++g) {
    const int64_t k0 = g * s.group_size, k1 = std::min(s.in_features, k0 + s.group_size);
    const float amax = abs_max(x + k0, k1 - k0);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    r.x_scale[g] = amax / 127.0f;
    r.x_sum[g] = quantize_octets_a8(x, k1, inv, s.group_octet_begin(g), s.group_octet_end(g), r);
  }
}

void one_row_w4a8(const W4RowA8& r, const W4Shape& s, const uint32_t* packed, const float* scale,
                  const uint8_t* zero, float* y, int num_threads) {
  for_one_row_tiles(s.out_features, num_threads, [&](auto panels, int64_t p0, int64_t num_cols, int64_t n0) {
    gemv_tile_w4a8<decltype(panels)::value>(r, s, packed, scale, zero, p0, num_cols, y + n0);
  });
}

// Many rows with int8 activations: each row's quads, then row tiles per panel.
void rows_w4a8(const float* x, int64_t num_rows, const W4Shape& s, const uint32_t* packed, const float* scale,
               const uint8_t* zero, float* y, float* scratch, int num_threads) {
  const int64_t n_panels = num_panels16(s.out_features);
  WorkShares panels(n_panels, num_threads);  // shared out after the rows are quantized
#pragma omp parallel num_threads(num_threads) if (num_threads > 1 && num_rows * s.in_features * s.out_features >= (1 << 18))
  {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < num_rows; ++m) quantize_row_a8(x + m * s.in_features, s, row_a8_at(scratch, s, m));
    panels.take(omp_get_thread_num(), [&](int64_t p, int) {
      const int64_t n0 = p * kPanels16Width;
      const int64_t cols = std::min<int64_t>(kPanels16Width, s.out_features - n0);
#if defined(__AVX2__)
      for (int64_t m = 0; m < num_rows; m += 4) {
        W4RowA8 rows[4];
        const int r = static_cast<int>(std::min<int64_t>(4, num_rows - m));
        for (int i = 0; i < r; ++i) rows[i] = row_a8_at(scratch, s, m + i);
        float* yt = y + m * s.out_features + n0;
        switch (r) {
          case 4: rows_panel_w4a8<4>(rows, s, packed, scale, zero, p, cols, yt, s.out_features); break;
          case 3: rows_panel_w4a8<3>(rows, s, packed, scale, zero, p, cols, yt, s.out_features); break;
          case 2: rows_panel_w4a8<2>(rows, s, packed, scale, zero, p, cols, yt, s.out_features); break;
          default: rows_panel_w4a8<1>(rows, s, packed, scale, zero, p, cols, yt, s.out_features); break;
        }
      }
#else
      for (int64_t m = 0; m < num_rows; ++m)
        gemv_tile_w4a8<1>(row_a8_at(scratch, s, m), s, packed, scale, zero, p, cols, y + m * s.out_features + n0);
#endif
    });
  }
}

}  // namespace llmk::kernels::cpu
