#include "kernels/cpu/linear_w4_tiles.hpp"

#if defined(__AVX512F__) && defined(__x86_64__) && defined(__linux__)
#define LLMK_W4_TILES 1
// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized inside
// <immintrin.h> itself (a false positive in the compiler's own header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/work_shares.hpp"

namespace llmk::kernels::cpu {

bool w4_amx_shape(const W4Shape& s) {
  // Whole 64-input tiles in every group (the last one included), and a
  // group's tiles fit the kernel's buffer.
  return s.valid() && s.in_features % 64 == 0 && s.group_size % 64 == 0 && s.group_size <= 512;
}

#if defined(LLMK_W4_TILES)

bool w4_amx_built() { return true; }

bool w4_amx_available() {
  static const bool available = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1u, int8 = (d >> 25) & 1u;
    if (!tile || !int8) return false;
    // Linux hands out the tile data state only on request (5.16 and later):
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA. Without it the first tile
    // instruction faults.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return available;
}

namespace w4_tiles {
namespace {

// The tile registers the kernel uses: C (int32 sums) tmm0, A (a block's
// int8 rows, 64 inputs) tmm1, B (one panel's weights for those inputs, as
// 16 rows of 4 bytes per channel) tmm2.
constexpr int kTileRows = 16;
constexpr int kTileBytes = 64;

// ldtilecfg's operand: palette 1, then per tile its bytes per row and rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  explicit TileConfig(int a_rows) {
    colsb[0] = colsb[1] = colsb[2] = kTileBytes;
    rows[0] = rows[1] = static_cast<uint8_t>(a_rows);
    rows[2] = kTileRows;
  }
};
static_assert(sizeof(TileConfig) == 64);

// The tile unit. Each thread configures its own (tile state is per thread)
// and releases it when done.
class HardwareTiles {
 public:
  HardwareTiles() = default;
  HardwareTiles(const HardwareTiles&) = delete;
  HardwareTiles& operator=(const HardwareTiles&) = delete;
  __attribute__((target("amx-tile"))) ~HardwareTiles() {
    if (configured_) _tile_release();
  }
  __attribute__((target("amx-tile"))) void configure(int a_rows) {
    const TileConfig config(a_rows);
    // Not _tile_loadconfig: GCC 12's names only the first 8 bytes as read,
    // so the stores of the tiles' shapes were dropped as dead. This operand
    // is the whole 64-byte configuration.
    asm volatile("ldtilecfg %0" ::"m"(config));
    configured_ = true;
  }
  __attribute__((target("amx-tile"))) void zero_c() { _tile_zero(0); }
  __attribute__((target("amx-tile"))) void load_a(const void* p, int64_t stride) {
    asm volatile("" ::: "memory");  // the tile load reads memory the compiler cannot see it read
    _tile_loadd(1, p, stride);
  }
  __attribute__((target("amx-tile"))) void load_b(const void* p) {
    asm volatile("" ::: "memory");
    _tile_loadd(2, p, kTileBytes);
  }
  __attribute__((target("amx-tile,amx-int8"))) void multiply() { _tile_dpbsud(0, 1, 2); }
  __attribute__((target("amx-tile"))) void store_c(int32_t* p) { _tile_stored(0, p, kTileBytes); }

 private:
  bool configured_ = false;
};

// The same operations on arrays, as the instructions define them: tdpbsud
// adds to each int32 of C, per group of four bytes, the products of A's
// signed bytes with B's unsigned ones.
class ModelTiles {
 public:
  void configure(int a_rows) { a_rows_ = a_rows; }
  void zero_c() { std::memset(c_, 0, sizeof(c_)); }
  void load_a(const void* p, int64_t stride) {
    for (int m = 0; m < a_rows_; ++m) std::memcpy(a_[m], static_cast<const uint8_t*>(p) + m * stride, kTileBytes);
  }
  void load_b(const void* p) { std::memcpy(b_, p, sizeof(b_)); }
  void multiply() {
    for (int m = 0; m < a_rows_; ++m)
      for (int k = 0; k < kTileBytes / 4; ++k)
        for (int n = 0; n < kTileBytes / 4; ++n)
          for (int i = 0; i < 4; ++i)
            c_[m][n] += static_cast<int32_t>(static_cast<int8_t>(a_[m][4 * k + i])) * b_[k][4 * n + i];
  }
  void store_c(int32_t* p) { std::memcpy(p, c_, static_cast<size_t>(a_rows_) * kTileBytes); }

 private:
  int a_rows_ = kTileRows;
  uint8_t a_[kTileRows][kTileBytes] = {};
  uint8_t b_[kTileRows][kTileBytes] = {};
  int32_t c_[kTileRows][kTileBytes / 4] = {};
};

// Panel p (16 channels, cols of them real) for every row: y's columns
// [16 p, 16 p + cols) of each row, ldy floats apart.
template <class Tiles>
void panel(Tiles& tiles, int& configured_rows, const W4Shape& s, const uint32_t* packed, const float* scale,
           const uint8_t* zero, const float* rows, int64_t row_floats, int64_t num_rows, int64_t p, int64_t cols,
           float* y, int64_t ldy) {
  const int64_t num_octets = s.k_pad() / 8;
  const int64_t num_groups = s.num_groups();
  const auto mask = static_cast<__mmask16>((1u << cols) - 1u);  // cols in [1, 16]
  const __m512i low = _mm512_set1_epi8(0x0f);
  const uint32_t* words = packed + p * num_octets * kPanels16Width;
  const int64_t row_bytes = row_floats * static_cast<int64_t>(sizeof(float));
  alignas(64) uint8_t b[512 / 64][kTileRows * kTileBytes];  // a group's B tiles (w4_amx_shape: group <= 512)
  alignas(64) int32_t c[kTileRows][kTileBytes / 4];
  for (int64_t m = 0; m < num_rows; ++m) _mm512_mask_storeu_ps(y + m * ldy, mask, _mm512_setzero_ps());
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t o_begin = s.group_octet_begin(g);
    const int64_t chunks = (s.group_octet_end(g) - o_begin) / 8;  // 64 inputs each
    // Octet o's line of 16 words gives two B rows: its low nibbles (against
    // the even quad) and its high nibbles (against the odd quad), four
    // bytes per channel as tdpbsud pairs them with A's quads.
    for (int64_t t = 0; t < chunks; ++t)
      for (int i = 0; i < 8; ++i) {
        const __m512i line = _mm512_loadu_si512(words + (o_begin + 8 * t + i) * kPanels16Width);
        _mm512_store_si512(b[t] + (2 * i) * kTileBytes, _mm512_and_si512(line, low));
        _mm512_store_si512(b[t] + (2 * i + 1) * kTileBytes, _mm512_and_si512(_mm512_srli_epi32(line, 4), low));
      }
    const int64_t at = (p * num_groups + g) * kPanels16Width;
    const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zero + at))));
    const __m512 sc = _mm512_loadu_ps(scale + at);
    for (int64_t m0 = 0; m0 < num_rows; m0 += kTileRows) {
      const int r_count = static_cast<int>(std::min<int64_t>(kTileRows, num_rows - m0));
      if (r_count != configured_rows) tiles.configure(configured_rows = r_count);
      const float* block = rows + m0 * row_floats;
      tiles.zero_c();
      for (int64_t t = 0; t < chunks; ++t) {
        // Row m's quads of octets [o, o + 8): 64 bytes from byte 8 o of the row.
        tiles.load_a(reinterpret_cast<const uint8_t*>(block) + 8 * (o_begin + 8 * t), row_bytes);
        tiles.load_b(b[t]);
        tiles.multiply();
      }
      tiles.store_c(&c[0][0]);
      for (int r = 0; r < r_count; ++r) {
        const float* row = block + r * row_floats;
        const float x_scale = row[s.k_pad() / 4 + g];
        const auto x_sum = static_cast<float>(reinterpret_cast<const int32_t*>(row + s.k_pad() / 4 + num_groups)[g]);
        const __m512 dot = _mm512_fnmadd_ps(z, _mm512_set1_ps(x_sum), _mm512_cvtepi32_ps(_mm512_load_si512(c[r])));
        float* out = y + (m0 + r) * ldy;
        const __m512 total =
            _mm512_fmadd_ps(_mm512_mul_ps(sc, _mm512_set1_ps(x_scale)), dot, _mm512_maskz_loadu_ps(mask, out));
        _mm512_mask_storeu_ps(out, mask, total);
      }
    }
  }
}

template <class Tiles>
void all_rows(const W4Shape& s, const uint32_t* packed, const float* scale, const uint8_t* zero, const float* rows,
              int64_t row_floats, int64_t num_rows, float* y, int num_threads) {
  const int64_t n_panels = num_panels16(s.out_features);
  const int threads = static_cast<int>(std::clamp<int64_t>(num_threads, 1, n_panels));
  WorkShares panels(n_panels, threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    Tiles tiles;  // configured by the first panel this thread takes
    int configured_rows = 0;
    panels.take(omp_get_thread_num(), [&](int64_t p, int) {
      const int64_t n0 = p * kPanels16Width;
      panel(tiles, configured_rows, s, packed, scale, zero, rows, row_floats, num_rows, p,
            std::min<int64_t>(kPanels16Width, s.out_features - n0), y + n0, s.out_features);
    });
  }
}

}  // namespace

void rows(bool model, const W4Shape& s, const uint32_t* packed, const float* scale, const uint8_t* zero,
          const float* rows, int64_t row_floats, int64_t num_rows, float* y, int num_threads) {
  if (model) all_rows<ModelTiles>(s, packed, scale, zero, rows, row_floats, num_rows, y, num_threads);
  else all_rows<HardwareTiles>(s, packed, scale, zero, rows, row_floats, num_rows, y, num_threads);
}

}  // namespace w4_tiles

#else  // no AVX-512 in this build: the tile kernel is not here

bool w4_amx_built() { return false; }
bool w4_amx_available() { return false; }

namespace w4_tiles {
void rows(bool, const W4Shape&, const uint32_t*, const float*, const uint8_t*, const float*, int64_t, int64_t, float*,
          int) {}
}  // namespace w4_tiles

#endif

}  // namespace llmk::kernels::cpu
