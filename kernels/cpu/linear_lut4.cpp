// linear_lut4 (linear_lut4.hpp): the codebooks, quantizing at load, packing,
// the portable kernels and the dispatch to the per-level ones
// (linear_lut4_units.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/linear_lut4_impl.hpp"
#include "kernels/cpu/linear_panels16.hpp"

namespace llmk::kernels::cpu {

namespace {

Lut4Codebook make_codebook(const float* values, const int8_t* levels, float unit) {
  Lut4Codebook c{};
  for (int i = 0; i < 16; ++i) {
    c.values[i] = values != nullptr ? values[i] : static_cast<float>(levels[i]);
    c.levels[i] = levels[i];
    c.max_abs = std::max(c.max_abs, std::fabs(c.values[i]));
  }
  c.unit = unit;
  return c;
}

inline float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// Index of the value nearest t (the lower one on a tie): how many of the
// midpoints between neighbouring values lie below t.
struct Nearest {
  float mid[15];
  explicit Nearest(const Lut4Codebook& c) {
    for (int i = 0; i < 15; ++i) mid[i] = 0.5f * (c.values[i] + c.values[i + 1]);
  }
  uint8_t operator()(float t) const {
    int q = 0;
    for (int i = 0; i < 15; ++i) q += t > mid[i] ? 1 : 0;
    return static_cast<uint8_t>(q);
  }
};

// One block of n weights: indices into q, returns the scale.
float quantize_block(const float* w, int64_t n, const Lut4Codebook& c, const Nearest& nearest, Lut4Scale mode,
                     bool f16, uint8_t* q) {
  float amax = 0.0f, m = 0.0f;  // largest magnitude, and that weight with its sign
  for (int64_t k = 0; k < n; ++k)
    if (std::fabs(w[k]) > amax) {
      amax = std::fabs(w[k]);
      m = w[k];
    }
  auto assign = [&](float s, uint8_t* out) {
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    for (int64_t k = 0; k < n; ++k) out[k] = nearest(w[k] * inv);
  };
  auto error = [&](float s, const uint8_t* idx) {
    double e = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const double d = double(w[k]) - double(s) * c.values[idx[k]];
      e += d * d;
    }
    return e;
  };
  float s = amax / c.max_abs;
  if (f16) s = f16_round(s);
  assign(s, q);
  if (mode == Lut4Scale::absmax || amax == 0.0f) return s;

  // The search: the largest weight on the longer end (ties: its own sign's end).
  const float end = std::fabs(c.values[0]) > std::fabs(c.values[15]) ? c.values[0]
                    : std::fabs(c.values[15]) > std::fabs(c.values[0]) ? c.values[15]
                    : (m < 0 ? c.values[0] : c.values[15]);
  const float s0 = m / end;
  double best = error(s, q);
  uint8_t trial[kLut4MaxBlock];
  for (int t = 0; t <= 10; ++t) {
    const float f = 0.90f + 0.02f * static_cast<float>(t);
    assign(s0 / f, trial);
    double wv = 0.0, vv = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      wv += double(w[k]) * c.values[trial[k]];
      vv += double(c.values[trial[k]]) * c.values[trial[k]];
    }
    if (vv == 0.0) continue;
    float st = static_cast<float>(wv / vv);
    if (f16) st = f16_round(st);
    const double e = error(st, trial);
    if (e < best) {
      best = e;
      s = st;
      std::memcpy(q, trial, static_cast<size_t>(n));
    }
  }
  return s;
}

// The portable kernels. int8: per row, q[num_units * 64] then d[num_units * 2]
// (f16-rounded, as the records of the native path).
void portable_round(const float* x, int64_t num_rows, const Lut4Shape& s, uint8_t* act) {
  const int64_t units = s.num_units();
  for (int64_t m = 0; m < num_rows; ++m) {
    auto* q = reinterpret_cast<int8_t*>(act + m * units * lut4::kActUnitBytes);
    auto* d = reinterpret_cast<float*>(q + units * 64);
    std::memset(q, 0, static_cast<size_t>(units * 64));
    std::fill(d, d + 2 * units, 0.0f);
    for (int64_t c = 0; c < s.in_features / 32; ++c) {
      const float* xc = x + m * s.in_features + 32 * c;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xc[i]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int i = 0; i < 32; ++i) q[32 * c + i] = static_cast<int8_t>(std::nearbyint(xc[i] * id));
      d[c] = f16_round(amax / 127.0f);
    }
  }
}

void portable_pass(Lut4Activations a, const Lut4Codebook& c, const float* x, const uint8_t* act, int64_t num_rows,
                   const Lut4Shape& s, const uint8_t* packed, float* y, int num_threads) {
  const int64_t units = s.num_units();
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t n = 0; n < s.out_features; ++n)
    for (int64_t m = 0; m < num_rows; ++m) {
      float acc = 0.0f;
      const auto* q = reinterpret_cast<const int8_t*>(act + m * units * lut4::kActUnitBytes);
      const auto* d = reinterpret_cast<const float*>(q + units * 64);
      for (int64_t u = 0; u < units; ++u) {
        const uint8_t* b = packed + (n * units + u) * kLut4UnitBytes;
        for (int h = 0; h < 2 && 64 * u + 32 * h < s.in_features; ++h) {
          const float sc = lut4_scale_at(packed, s, n, 64 * u + 32 * h);
          if (a == Lut4Activations::int8) {
            int32_t sum = 0;
            for (int i = 0; i < 32; ++i) sum += c.levels[(b[4 + i] >> (4 * h)) & 15] * q[64 * u + 32 * h + i];
            acc += static_cast<float>(sum) * (sc * d[2 * u + h]);
          } else {
            const float* xr = x + m * s.in_features + 64 * u + 32 * h;
            float part = 0.0f;
            for (int i = 0; i < 32; ++i) part += c.values[(b[4 + i] >> (4 * h)) & 15] * xr[i];
            acc += sc * part;
          }
        }
      }
      y[m * s.out_features + n] = a == Lut4Activations::int8 ? acc * c.unit : acc;
    }
}

// Panel p (output channels 16p..16p+15) as f32: out [in_features][16], zero past out_features.
void dequantize_panel(const Lut4Shape& s, const Lut4Codebook& c, const uint8_t* packed, int64_t p, float* out) {
  const int64_t units = s.num_units();
  for (int64_t l = 0; l < kPanels16Width; ++l) {
    const int64_t n = p * kPanels16Width + l;
    if (n >= s.out_features) {
      for (int64_t k = 0; k < s.in_features; ++k) out[k * kPanels16Width + l] = 0.0f;
      continue;
    }
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* b = packed + (n * units + u) * kLut4UnitBytes;
      for (int h = 0; h < 2; ++h) {
        const int64_t k0 = 64 * u + 32 * h;
        if (k0 >= s.in_features) break;
        const float sc = lut4_scale_at(packed, s, n, k0);
        const int len = static_cast<int>(std::min<int64_t>(32, s.in_features - k0));
        for (int i = 0; i < len; ++i) out[(k0 + i) * kPanels16Width + l] = sc * c.values[(b[4 + i] >> (4 * h)) & 15];
      }
    }
  }
}

}  // namespace

const Lut4Codebook& lut4_codebook(Lut4Book book) noexcept {
  static const Lut4Codebook nf4 = make_codebook(lut4::kNf4Values, lut4::kNf4Levels, 1.0f / 127.0f);
  static const Lut4Codebook iq4_nl = make_codebook(nullptr, lut4::kIq4NlLevels, 1.0f);
  return book == Lut4Book::nf4 ? nf4 : iq4_nl;
}

void quantize_lut4(const float* w, const Lut4Shape& s, Lut4Book book, Lut4Scale mode, uint8_t* q, float* scale,
                   int num_threads) {
  const Lut4Codebook& c = lut4_codebook(book);
  const Nearest nearest(c);
  const int64_t nb = s.num_blocks();
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t n = 0; n < s.out_features; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * s.block_size, len = std::min(s.block_size, s.in_features - k0);
      scale[n * nb + b] = quantize_block(w + n * s.in_features + k0, len, c, nearest, mode, s.f16_scales(),
                                         q + n * s.in_features + k0);
    }
}

void pack_lut4(const uint8_t* q, const float* scale, const Lut4Shape& s, uint8_t* packed) {
  const int64_t units = s.num_units(), nb = s.num_blocks();
  for (int64_t n = 0; n < s.out_features; ++n)
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* b = packed + (n * units + u) * kLut4UnitBytes;
      const bool second = 64 * u + 32 < s.in_features;
      if (s.f16_scales()) {
        const uint16_t h[2] = {f32_to_f16(scale[n * nb + 2 * u]), second ? f32_to_f16(scale[n * nb + 2 * u + 1])
                                                                         : uint16_t{0}};
        std::memcpy(b, h, 4);
      } else {
        std::memcpy(b, &scale[n * nb + 64 * u / s.block_size], 4);
      }
      auto at = [&](int64_t k) { return k < s.in_features ? q[n * s.in_features + k] & 15 : 0; };
      for (int i = 0; i < 32; ++i) b[4 + i] = static_cast<uint8_t>(at(64 * u + i) | at(64 * u + 32 + i) << 4);
    }
}

void pack_lut4_iq4_nl(const void* blocks, const Lut4Shape& s, uint8_t* packed, int num_threads) {
  const auto* src = static_cast<const uint8_t*>(blocks);
  const int64_t units = s.num_units(), nb = s.in_features / 32;
#pragma omp parallel for num_threads(num_threads) if (num_threads > 1) schedule(static)
  for (int64_t n = 0; n < s.out_features; ++n)
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* b = packed + (n * units + u) * kLut4UnitBytes;
      std::memset(b, 0, kLut4UnitBytes);
      for (int64_t h = 0; h < 2 && 2 * u + h < nb; ++h) {
        const uint8_t* blk = src + (n * nb + 2 * u + h) * 18;
        std::memcpy(b + 2 * h, blk, 2);
        for (int j = 0; j < 32; ++j) {
          const uint8_t v = static_cast<uint8_t>(j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4);
          b[4 + j] = static_cast<uint8_t>(b[4 + j] | v << (4 * h));
        }
      }
    }
}

uint8_t lut4_index_at(const uint8_t* packed, const Lut4Shape& s, int64_t n, int64_t k) {
  const uint8_t* b = packed + (n * s.num_units() + k / 64) * kLut4UnitBytes;
  return static_cast<uint8_t>((b[4 + k % 32] >> (k % 64 < 32 ? 0 : 4)) & 15);
}

float lut4_scale_at(const uint8_t* packed, const Lut4Shape& s, int64_t n, int64_t k) {
  const uint8_t* b = packed + (n * s.num_units() + k / 64) * kLut4UnitBytes;
  if (s.f16_scales()) {
    uint16_t h;
    std::memcpy(&h, b + (k % 64 < 32 ? 0 : 2), 2);
    return f16_to_f32(h);
  }
  float v;
  std::memcpy(&v, b, 4);
  return v;
}

// Rows rounded or padded (num_units * kActUnitBytes each), then, where
// in_features is not a multiple of 32, x padded with zeros to k32.
// (f32 rows, more than one: the dequantized panels instead.)
size_t lut4_scratch_size(const Lut4Shape& s, int64_t max_rows, Lut4Activations activations, int num_threads) {
  const int64_t rows = std::max<int64_t>(1, max_rows);
  const int64_t padded = s.k32() == s.in_features ? 0 : rows * s.k32() * static_cast<int64_t>(sizeof(float));
  const size_t own = static_cast<size_t>(rows * s.num_units() * lut4::kActUnitBytes + padded);
  if (activations != Lut4Activations::f32 || rows == 1) return own;
  return std::max(own, dequantized_panels16_scratch_size(s.in_features, std::max(1, num_threads)) * sizeof(float));
}

void linear_lut4(const float* x, int64_t num_rows, const Lut4Shape& s_in, Lut4Book book, const uint8_t* packed, float* y,
                 void* scratch, int num_threads, Lut4Activations a, Lut4Kernels kernels) {
  if (num_rows <= 0) return;
  const Lut4Codebook& c = lut4_codebook(book);
  if (a == Lut4Activations::f32 && num_rows > 1 && kernels == Lut4Kernels::native) {
    linear_dequantized_panels16(
        x, num_rows, s_in.in_features, [&](int64_t p, float* out) { dequantize_panel(s_in, c, packed, p, out); },
        s_in.out_features, y, static_cast<float*>(scratch), num_threads);
    return;
  }
  auto* act = static_cast<uint8_t*>(scratch);
  if (s_in.k32() != s_in.in_features) {
    auto* xp = reinterpret_cast<float*>(act + num_rows * s_in.num_units() * lut4::kActUnitBytes);
    for (int64_t m = 0; m < num_rows; ++m) {
      std::memcpy(xp + m * s_in.k32(), x + m * s_in.in_features, static_cast<size_t>(s_in.in_features) * sizeof(float));
      std::fill(xp + m * s_in.k32() + s_in.in_features, xp + (m + 1) * s_in.k32(), 0.0f);
    }
    x = xp;
  }
  const Lut4Shape s{s_in.k32(), s_in.out_features, s_in.block_size};
  if (kernels == Lut4Kernels::native && lut4::native_round(a, x, num_rows, s, act, num_threads)) {
    lut4::native_pass(a, book, act, num_rows, s, packed, y, num_threads);
    if (a == Lut4Activations::int8 && c.unit != 1.0f) {
      const int64_t total = num_rows * s.out_features;
      for (int64_t i = 0; i < total; ++i) y[i] *= c.unit;
    }
    return;
  }
  if (a == Lut4Activations::int8) portable_round(x, num_rows, s, act);
  portable_pass(a, c, x, act, num_rows, s, packed, y, num_threads);
}

}  // namespace llmk::kernels::cpu
