#include "core/gguf_types.hpp"

#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace llmk {
namespace {

// Little-endian loads: block fields are not aligned to their size.
inline float load_f16(const uint8_t* p) noexcept { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

void dequantize_q8_0(const uint8_t* block, float* y) {  // 34 bytes -> 32 values
  const float d = load_f16(block);
  const auto* q = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
}

void dequantize_q4_0(const uint8_t* block, float* y) {  // 18 bytes -> 32 values
  const float d = load_f16(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Sub-block j's 6-bit scale and min from Q4_K's 12 packed bytes: the first
// four sub-blocks use the low 6 bits of bytes 0..3 (scale) and 4..7 (min);
// the last four take 4 bits from bytes 8..11 and their top 2 bits from the
// high bits of bytes 0..7.
void q4_k_scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

void dequantize_q4_k(const uint8_t* block, float* y) {  // 144 bytes -> 256 values
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qs = block + 16;
  for (int pair = 0; pair < 4; ++pair) {  // 64 values: two sub-blocks sharing 32 bytes
    uint8_t sc0, m0, sc1, m1;
    q4_k_scale_min(scales, 2 * pair, sc0, m0);
    q4_k_scale_min(scales, 2 * pair + 1, sc1, m1);
    const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
    for (int l = 0; l < 32; ++l) y[l] = d0 * static_cast<float>(qs[l] & 0x0F) - min0;
    for (int l = 0; l < 32; ++l) y[32 + l] = d1 * static_cast<float>(qs[l] >> 4) - min1;
    y += 64;
    qs += 32;
  }
}

void dequantize_q6_k(const uint8_t* block, float* y) {  // 210 bytes -> 256 values
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  for (int half = 0; half < 2; ++half) {  // 128 values from 64 bytes of ql and 32 of qh
    for (int l = 0; l < 32; ++l) {
      const int g = l / 16;  // group of 16 within each run of 32
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) noexcept {
  static const GgmlTypeInfo kF32{"F32", 1, 4, true}, kF16{"F16", 1, 2, true}, kQ4_0{"Q4_0", 32, 18, true},
      kQ4_1{"Q4_1", 32, 20, false}, kQ5_0{"Q5_0", 32, 22, false}, kQ5_1{"Q5_1", 32, 24, false},
      kQ8_0{"Q8_0", 32, 34, true}, kQ8_1{"Q8_1", 32, 36, false}, kQ2_K{"Q2_K", 256, 84, false},
      kQ3_K{"Q3_K", 256, 110, false}, kQ4_K{"Q4_K", 256, 144, true}, kQ5_K{"Q5_K", 256, 176, false},
      kQ6_K{"Q6_K", 256, 210, true}, kQ8_K{"Q8_K", 256, 292, false}, kI8{"I8", 1, 1, false},
      kI16{"I16", 1, 2, false}, kI32{"I32", 1, 4, false}, kI64{"I64", 1, 8, false}, kF64{"F64", 1, 8, false},
      kBF16{"BF16", 1, 2, true};
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32: return &kF32;
    case GgmlType::f16: return &kF16;
    case GgmlType::q4_0: return &kQ4_0;
    case GgmlType::q4_1: return &kQ4_1;
    case GgmlType::q5_0: return &kQ5_0;
    case GgmlType::q5_1: return &kQ5_1;
    case GgmlType::q8_0: return &kQ8_0;
    case GgmlType::q8_1: return &kQ8_1;
    case GgmlType::q2_k: return &kQ2_K;
    case GgmlType::q3_k: return &kQ3_K;
    case GgmlType::q4_k: return &kQ4_K;
    case GgmlType::q5_k: return &kQ5_K;
    case GgmlType::q6_k: return &kQ6_K;
    case GgmlType::q8_k: return &kQ8_K;
    case GgmlType::i8: return &kI8;
    case GgmlType::i16: return &kI16;
    case GgmlType::i32: return &kI32;
    case GgmlType::i64: return &kI64;
    case GgmlType::f64: return &kF64;
    case GgmlType::bf16: return &kBF16;
  }
  return nullptr;
}

const char* ggml_dequantizable_type_names() noexcept { return "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K"; }

void dequantize_ggml(GgmlType type, const void* src, float* dst, int64_t num_values) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  if (info == nullptr || !info->can_dequantize)
    throw Error(ErrorCode::unsupported, std::string("GGUF tensor type ") + (info ? info->name : "?") +
                                            " cannot be loaded (supported: " + ggml_dequantizable_type_names() + ")");
  if (num_values < 0 || num_values % info->block_size != 0)
    throw Error(ErrorCode::invalid_argument, "dequantize_ggml: " + std::to_string(num_values) +
                                                 " values is not a whole number of " + info->name + " blocks");
  if (num_values == 0) return;  // dst may be null for an empty tensor
  const auto* in = static_cast<const uint8_t*>(src);
  const int64_t num_blocks = num_values / info->block_size;
  switch (type) {
    case GgmlType::f32:
      std::memcpy(dst, src, static_cast<size_t>(num_values) * 4);
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < num_values; ++i) dst[i] = load_f16(in + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < num_values; ++i) dst[i] = bf16_to_f32(static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
      return;
    default:
      break;
  }
  void (*decode)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::q8_0: decode = dequantize_q8_0; break;
    case GgmlType::q4_0: decode = dequantize_q4_0; break;
    case GgmlType::q4_k: decode = dequantize_q4_k; break;
    case GgmlType::q6_k: decode = dequantize_q6_k; break;
    default: break;
  }
#pragma omp parallel for schedule(static) if (num_blocks >= 4096)
  for (int64_t b = 0; b < num_blocks; ++b) decode(in + b * info->type_size, dst + b * info->block_size);
}

}  // namespace llmk
