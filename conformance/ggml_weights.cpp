#include "conformance/ggml_weights.hpp"

#include <cstring>

#include "core/dtype.hpp"
#include "core/gguf_types.hpp"

namespace llmk::conformance {
namespace {

// Where a type's f16 scale fields sit in its block, and the largest
// |quant| a scale multiplies (the decoded value is about scale * quant):
// blocks get scales of about 1 / that, the mins of the K types likewise.
struct BlockFields {
  GgmlType type;
  int d_at;       // the f16 scale
  int m_at;       // the f16 min (or K types' dmin); -1 when none
  double range;   // largest |quant * sub-scale| one scale multiplies
};
constexpr BlockFields kFields[] = {
    {GgmlType::q4_0, 0, -1, 8},       {GgmlType::q4_1, 0, 2, 15},     {GgmlType::q5_0, 0, -1, 16},
    {GgmlType::q5_1, 0, 2, 31},       {GgmlType::q8_0, 0, -1, 127},   {GgmlType::q2_k, 80, 82, 45},
    {GgmlType::q3_k, 108, -1, 128},   {GgmlType::q4_k, 0, 2, 945},    {GgmlType::q5_k, 0, 2, 1953},
    {GgmlType::q6_k, 208, -1, 4064},  {GgmlType::iq4_nl, 0, -1, 127}, {GgmlType::iq4_xs, 0, -1, 4064},
};

const BlockFields* fields_of(uint32_t ggml_type) {
  for (const BlockFields& f : kFields)
    if (static_cast<uint32_t>(f.type) == ggml_type) return &f;
  return nullptr;
}

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

bool parse_ggml_weight_type(const std::string& entry, GgmlWeightType& type, std::string& why) {
  const std::string name = entry.rfind("ggml:", 0) == 0 ? entry.substr(5) : entry;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    if (info == nullptr || name != info->name) continue;
    if (fields_of(id) == nullptr || !info->can_dequantize) {
      why = "weight dtype '" + entry + "': the suite cannot make blocks of " + name;
      return false;
    }
    type.dtype = static_cast<uint32_t>(ggml_dtype(id));
    type.block_values = info->block_size;
    return true;
  }
  why = "weight dtype '" + entry + "' names no ggml type";
  return false;
}

std::vector<uint8_t> random_ggml_weight(const GgmlWeightType& type, int64_t rows, int64_t cols, std::mt19937& rng,
                                        std::vector<double>& values) {
  const uint32_t id = ggml_type_of(static_cast<DType>(type.dtype));
  const BlockFields& f = *fields_of(id);
  const size_t block_bytes = ggml_type_info(id)->type_size;
  const int64_t num_blocks = rows * cols / type.block_values;
  std::vector<uint8_t> blocks(static_cast<size_t>(num_blocks) * block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.25f, 1.0f);
  for (auto& b : blocks) b = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < num_blocks; ++i) {
    uint8_t* block = blocks.data() + static_cast<size_t>(i) * block_bytes;
    store_f16(block + f.d_at, static_cast<float>(unit(rng) / f.range));
    if (f.m_at >= 0) store_f16(block + f.m_at, static_cast<float>(unit(rng) / f.range));
  }
  std::vector<float> decoded(static_cast<size_t>(rows * cols));
  convert_to_f32(static_cast<DType>(type.dtype), blocks.data(), decoded.data(), decoded.size());
  values.assign(decoded.begin(), decoded.end());
  return blocks;
}

}  // namespace llmk::conformance
