#include "plugins/attention_cpu/kv_rows.hpp"

#include <cstring>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/kv_quant.hpp"

namespace llmk::attention_cpu {

namespace kc = kernels::cpu;

void write_kv(const llmk_kv_layer& kv, const KvShape& shape, const float* k, const float* v,
              const int32_t* slots, uint32_t num_tokens, int num_threads) {
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
#pragma omp parallel for num_threads(num_threads) if (num_tokens > 64)
  for (int64_t t = 0; t < static_cast<int64_t>(num_tokens); ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    if (shape.f16) {
      kc::f32_to_f16(k + t * row, static_cast<uint16_t*>(kv.k) + slot * row, row);
      kc::f32_to_f16(v + t * row, static_cast<uint16_t*>(kv.v) + slot * row, row);
      continue;
    }
    if (!shape.int8) {
      std::memcpy(static_cast<float*>(kv.k) + slot * row, k + t * row, static_cast<size_t>(row) * sizeof(float));
      std::memcpy(static_cast<float*>(kv.v) + slot * row, v + t * row, static_cast<size_t>(row) * sizeof(float));
      continue;
    }
    // Groups divide head_dim, so a whole token row quantizes as one: scales
    // land at [slot][kv_head][group] as the cache layout requires.
    const int64_t scale_row = row / shape.group_size;
    kc::kv_quantize(k + t * row, static_cast<int8_t*>(kv.k) + slot * row, kv.k_scale + slot * scale_row, 1, row,
                    shape.group_size);
    kc::kv_quantize(v + t * row, static_cast<int8_t*>(kv.v) + slot * row, kv.v_scale + slot * scale_row, 1, row,
                    shape.group_size);
  }
}

void read_kv(const llmk_kv_layer& kv, const KvShape& shape, const int32_t* table, uint32_t block_size,
             uint32_t kv_head, int64_t first, int64_t count, const float** k_rows, const float** v_rows,
             float* k_buf, float* v_buf) {
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  const int64_t head_off = static_cast<int64_t>(kv_head) * shape.head_dim;
  if (shape.f16) {
    const auto* kh = static_cast<const uint16_t*>(kv.k);
    const auto* vh = static_cast<const uint16_t*>(kv.v);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t slot = slot_of(table, block_size, first + i);
      float* kd = k_buf + i * shape.head_dim;
      float* vd = v_buf + i * shape.head_dim;
      kc::f16_to_f32(kh + slot * row + head_off, kd, shape.head_dim);
      kc::f16_to_f32(vh + slot * row + head_off, vd, shape.head_dim);
      k_rows[i] = kd;
      v_rows[i] = vd;
    }
    return;
  }
  if (!shape.int8) {
    const auto* kc = static_cast<const float*>(kv.k);
    const auto* vc = static_cast<const float*>(kv.v);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t slot = slot_of(table, block_size, first + i);
      k_rows[i] = kc + slot * row + head_off;
      v_rows[i] = vc + slot * row + head_off;
    }
    return;
  }
  const auto* kq = static_cast<const int8_t*>(kv.k);
  const auto* vq = static_cast<const int8_t*>(kv.v);
  const int64_t groups_per_head = shape.head_dim / shape.group_size;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = slot_of(table, block_size, first + i);
    const int64_t scale_off = (slot * shape.num_kv_heads + kv_head) * groups_per_head;
    float* kd = k_buf + i * shape.head_dim;
    float* vd = v_buf + i * shape.head_dim;
    kc::kv_dequantize_row(kq + slot * row + head_off, kv.k_scale + scale_off, kd, shape.head_dim, shape.group_size);
    kc::kv_dequantize_row(vq + slot * row + head_off, kv.v_scale + scale_off, vd, shape.head_dim, shape.group_size);
    k_rows[i] = kd;
    v_rows[i] = vd;
  }
}

}  // namespace llmk::attention_cpu
