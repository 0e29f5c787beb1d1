#include "core/gguf_types.hpp"

#include <cstring>
#include <iterator>
#include <string>

#include "core/error.hpp"
#include "core/gguf_blocks.hpp"

namespace llmk {

const GgmlTypeInfo* ggml_type_info(uint32_t type) noexcept {
  // Indexed by id; a null name marks an id ggml never used in files (4 and
  // 5 were Q4_2 / Q4_3, gone before GGUF existed).
  static const GgmlTypeInfo kTypes[] = {
      {"F32", 1, 4, true},          {"F16", 1, 2, true},         {"Q4_0", 32, 18, true},
      {"Q4_1", 32, 20, true},       {nullptr, 0, 0, false},      {nullptr, 0, 0, false},
      {"Q5_0", 32, 22, true},       {"Q5_1", 32, 24, true},      {"Q8_0", 32, 34, true},
      {"Q8_1", 32, 36, false},      {"Q2_K", 256, 84, true},     {"Q3_K", 256, 110, true},
      {"Q4_K", 256, 144, true},     {"Q5_K", 256, 176, true},    {"Q6_K", 256, 210, true},
      {"Q8_K", 256, 292, false},    {"IQ2_XXS", 256, 66, false}, {"IQ2_XS", 256, 74, false},
      {"IQ3_XXS", 256, 98, false},  {"IQ1_S", 256, 50, false},   {"IQ4_NL", 32, 18, true},
      {"IQ3_S", 256, 110, false},   {"IQ2_S", 256, 82, false},   {"IQ4_XS", 256, 136, true},
      {"I8", 1, 1, false},          {"I16", 1, 2, false},        {"I32", 1, 4, false},
      {"I64", 1, 8, false},         {"F64", 1, 8, false},        {"IQ1_M", 256, 56, false},
      {"BF16", 1, 2, true},         {"Q4_0_4_4", 32, 18, false}, {"Q4_0_4_8", 32, 18, false},
      {"Q4_0_8_8", 32, 18, false},  {"TQ1_0", 256, 54, true},    {"TQ2_0", 256, 66, true},
      {"IQ4_NL_4_4", 32, 18, false}, {"IQ4_NL_4_8", 32, 18, false}, {"IQ4_NL_8_8", 32, 18, false},
      {"MXFP4", 32, 17, true},      {"NVFP4", 64, 36, false},    {"Q1_0", 128, 18, false},
  };
  if (type >= std::size(kTypes) || kTypes[type].name == nullptr) return nullptr;
  return &kTypes[type];
}

const char* ggml_dequantizable_type_names() noexcept {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, TQ1_0, "
         "TQ2_0, MXFP4";
}

void dequantize_ggml(GgmlType type, const void* src, float* dst, int64_t num_values) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  if (info == nullptr || !info->can_dequantize)
    throw Error(ErrorCode::unsupported, std::string("GGUF tensor type ") +
                                            (info ? info->name : std::to_string(static_cast<uint32_t>(type)).c_str()) +
                                            " cannot be loaded (supported: " + ggml_dequantizable_type_names() + ")");
  if (num_values < 0 || num_values % info->block_size != 0)
    throw Error(ErrorCode::invalid_argument, "dequantize_ggml: " + std::to_string(num_values) +
                                                 " values is not a whole number of " + info->name + " blocks");
  if (num_values == 0) return;  // dst may be null for an empty tensor
  const auto* in = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::f32:
      std::memcpy(dst, src, static_cast<size_t>(num_values) * 4);
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < num_values; ++i) dst[i] = gguf_half_to_float(static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8)));
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < num_values; ++i) {
        const uint32_t bits = static_cast<uint32_t>(in[2 * i] | (in[2 * i + 1] << 8)) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    default:
      break;
  }
  const GgmlBlockDecoder decode = ggml_block_decoder(type);
  const int64_t num_blocks = num_values / info->block_size;
#pragma omp parallel for schedule(static) if (num_blocks >= 4096)
  for (int64_t b = 0; b < num_blocks; ++b) decode(in + b * info->type_size, dst + b * info->block_size);
}

}  // namespace llmk
