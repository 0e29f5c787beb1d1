#include "core/gguf_blocks.hpp"

#include <cstring>

namespace llmk {
namespace {

// Little-endian loads: block fields are not aligned to their size.
inline float load_f16(const uint8_t* p) noexcept { return gguf_half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
inline uint32_t load_u32(const uint8_t* p) noexcept {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline float f(int v) noexcept { return static_cast<float>(v); }

// IQ4_NL's 16 levels, and FP4 E2M1's values doubled (MXFP4).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int8_t kFp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void decode_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * f((qs[j] & 15) - 8);
    y[j + 16] = d * f((qs[j] >> 4) - 8);
  }
}

void decode_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * f(qs[j] & 15) + m;
    y[j + 16] = d * f(qs[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1's 5-bit value j from the nibbles and the 32 high bits.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
  return low | static_cast<int>((qh >> j) & 1) << 4;
}

void decode_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * f(q5_value(b + 6, qh, j) - 16);
}

void decode_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 32; ++j) y[j] = d * f(q5_value(b + 8, qh, j)) + m;
}

void decode_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = f(q[j]) * d;
}

// The 2-bit field of value i (0..255) in 64 bytes: bits 2s..2s+1 of
// qs[32c + l] for i = 128c + 32s + l (Q2_K, Q3_K, TQ2_0).
inline int two_bits(const uint8_t* qs, int i) { return (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

void decode_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * f(scales[g] & 15), ml = dmin * f(scales[g] >> 4);
    for (int i = 16 * g; i < 16 * g + 16; ++i) y[i] = dl * f(two_bits(qs, i)) - ml;
  }
}

void decode_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* s = b + 96;
  const float d = load_f16(b + 108);
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
    const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = d * f(static_cast<int8_t>(low | high << 4) - 32);
    for (int i = 16 * g; i < 16 * g + 16; ++i) {
      const int missing_high = ((hmask[i % 32] >> (i / 32)) & 1) ^ 1;
      y[i] = dl * f(two_bits(qs, i) - (missing_high << 2));
    }
  }
}

// Sub-block j's 6-bit scale and min from the 12 bytes Q4_K and Q5_K share:
// sub-blocks 0..3 take the low 6 bits of bytes j (scale) and j+4 (min);
// 4..7 take a nibble of byte j+4 and their top 2 bits from the high bits of
// bytes j-4 (scale) and j (min).
void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32, each with its own 6-bit scale and
// min; the low 4 bits of each value from qs (two sub-blocks per 32 bytes),
// Q5_K's fifth bit from qh (bit `sub` of byte l; null for Q4_K).
void decode_k_sub_blocks(const uint8_t* b, const uint8_t* qs, const uint8_t* qh, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    k_scale_min(b + 4, sub, sc, m);
    const float dl = d * f(sc), ml = dmin * f(m);
    const uint8_t* q = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      const int high = qh != nullptr ? ((qh[l] >> sub) & 1) << 4 : 0;
      y[32 * sub + l] = dl * f(((q[l] >> shift) & 15) | high) - ml;
    }
  }
}

void decode_q4_k(const uint8_t* b, float* y) { decode_k_sub_blocks(b, b + 16, nullptr, y); }

void decode_q5_k(const uint8_t* b, float* y) { decode_k_sub_blocks(b, b + 48, b + 16, y); }

void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, t = (i % 128) / 32, l = i % 32;
    const int low = (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 15;
    const int high = (qh[32 * h + l] >> (2 * t)) & 3;
    y[i] = (d * f(scales[i / 16])) * f((low | high << 4) - 32);
  }
}

void decode_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * f(kIq4Levels[qs[j] & 15]);
    y[j + 16] = d * f(kIq4Levels[qs[j] >> 4]);
  }
}

void decode_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const unsigned scales_h = b[2] | b[3] << 8;
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | static_cast<int>((scales_h >> (2 * ib)) & 3) << 4;
    const float dl = d * f(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * f(kIq4Levels[qs[16 * ib + j] & 15]);
      y[32 * ib + 16 + j] = dl * f(kIq4Levels[qs[16 * ib + j] >> 4]);
    }
  }
}

void decode_tq1_0(const uint8_t* b, float* y) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = load_f16(b + 52);
  const auto digit = [](uint8_t byte, int k) {
    const auto shifted = static_cast<uint8_t>(byte * kPow3[k]);  // mod 256: the digit moves to the top
    return ((shifted * 3) >> 8) - 1;
  };
  for (int i = 0; i < 160; ++i) y[i] = d * f(digit(qs[i % 32], i / 32));
  for (int i = 160; i < 240; ++i) y[i] = d * f(digit(qs[32 + i % 16], (i - 160) / 16));
  for (int i = 240; i < 256; ++i) y[i] = d * f(digit(qh[i % 4], (i - 240) / 4));
}

void decode_tq2_0(const uint8_t* b, float* y) {
  const float d = load_f16(b + 64);
  for (int i = 0; i < 256; ++i) y[i] = d * f(two_bits(b, i) - 1);
}

void decode_mxfp4(const uint8_t* b, float* y) {
  // E8M0 exponent e, halved to pair with the doubled levels: 2^(e-128),
  // a subnormal float for e < 2.
  const uint32_t bits = b[0] < 2 ? uint32_t(0x00200000) << b[0] : uint32_t(b[0] - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  const uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * f(kFp4Levels[qs[j] & 15]);
    y[j + 16] = d * f(kFp4Levels[qs[j] >> 4]);
  }
}

}  // namespace

float gguf_half_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 31u, man = h & 0x3FFu, bits;
  if (exp == 31) {
    bits = sign | 0x7F800000u | man << 13;  // infinity, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | (exp + 112) << 23 | man << 13;
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: normalise (man * 2^-24 is a normal float)
    exp = 113;
    while ((man & 0x400u) == 0) man <<= 1, --exp;
    bits = sign | exp << 23 | (man & 0x3FFu) << 13;
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

GgmlBlockDecoder ggml_block_decoder(GgmlType type) noexcept {
  switch (type) {
    case GgmlType::q4_0: return decode_q4_0;
    case GgmlType::q4_1: return decode_q4_1;
    case GgmlType::q5_0: return decode_q5_0;
    case GgmlType::q5_1: return decode_q5_1;
    case GgmlType::q8_0: return decode_q8_0;
    case GgmlType::q2_k: return decode_q2_k;
    case GgmlType::q3_k: return decode_q3_k;
    case GgmlType::q4_k: return decode_q4_k;
    case GgmlType::q5_k: return decode_q5_k;
    case GgmlType::q6_k: return decode_q6_k;
    case GgmlType::iq4_nl: return decode_iq4_nl;
    case GgmlType::iq4_xs: return decode_iq4_xs;
    case GgmlType::tq1_0: return decode_tq1_0;
    case GgmlType::tq2_0: return decode_tq2_0;
    case GgmlType::mxfp4: return decode_mxfp4;
    default: return nullptr;
  }
}

}  // namespace llmk
