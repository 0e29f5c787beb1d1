#include "plugins/attention_cpu/kv_rows.hpp"

#include <cmath>
#include <cstring>

namespace llmk::attention_cpu {

namespace {

// Symmetric int8 per group: scale = max|x| / 127, q = round(x / scale).
void quantize_row(const float* x, int8_t* q, float* scales, uint32_t dim, uint32_t group) {
  for (uint32_t g0 = 0; g0 < dim; g0 += group) {
    float amax = 0.0f;
    for (uint32_t i = 0; i < group; ++i) amax = std::fmax(amax, std::fabs(x[g0 + i]));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (uint32_t i = 0; i < group; ++i) q[g0 + i] = static_cast<int8_t>(std::nearbyint(x[g0 + i] * inv));
    scales[g0 / group] = scale;
  }
}

void dequantize_row(const int8_t* q, const float* scales, float* x, uint32_t dim, uint32_t group) {
  for (uint32_t g0 = 0; g0 < dim; g0 += group) {
    const float scale = scales[g0 / group];
    for (uint32_t i = 0; i < group; ++i) x[g0 + i] = static_cast<float>(q[g0 + i]) * scale;
  }
}

}  // namespace

void write_kv(const llmk_kv_layer& kv, const KvShape& shape, const float* k, const float* v,
              const int32_t* slots, uint32_t num_tokens, int num_threads) {
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
#pragma omp parallel for num_threads(num_threads) if (num_tokens > 64)
  for (int64_t t = 0; t < static_cast<int64_t>(num_tokens); ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    if (!shape.int8) {
      std::memcpy(static_cast<float*>(kv.k) + slot * row, k + t * row, static_cast<size_t>(row) * sizeof(float));
      std::memcpy(static_cast<float*>(kv.v) + slot * row, v + t * row, static_cast<size_t>(row) * sizeof(float));
      continue;
    }
    const int64_t groups_per_head = shape.head_dim / shape.group_size;
    for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
      const int64_t off = slot * row + static_cast<int64_t>(h) * shape.head_dim;
      const int64_t scale_off = (slot * shape.num_kv_heads + h) * groups_per_head;
      quantize_row(k + t * row + h * shape.head_dim, static_cast<int8_t*>(kv.k) + off, kv.k_scale + scale_off,
                   shape.head_dim, shape.group_size);
      quantize_row(v + t * row + h * shape.head_dim, static_cast<int8_t*>(kv.v) + off, kv.v_scale + scale_off,
                   shape.head_dim, shape.group_size);
    }
  }
}

void read_kv(const llmk_kv_layer& kv, const KvShape& shape, const int32_t* table, uint32_t block_size,
             uint32_t kv_head, int64_t first, int64_t count, const float** k_rows, const float** v_rows,
             float* k_buf, float* v_buf) {
  const int64_t row = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
  const int64_t head_off = static_cast<int64_t>(kv_head) * shape.head_dim;
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
  const auto* kc = static_cast<const int8_t*>(kv.k);
  const auto* vc = static_cast<const int8_t*>(kv.v);
  const int64_t groups_per_head = shape.head_dim / shape.group_size;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = slot_of(table, block_size, first + i);
    const int64_t scale_off = (slot * shape.num_kv_heads + kv_head) * groups_per_head;
    float* kd = k_buf + i * shape.head_dim;
    float* vd = v_buf + i * shape.head_dim;
    dequantize_row(kc + slot * row + head_off, kv.k_scale + scale_off, kd, shape.head_dim, shape.group_size);
    dequantize_row(vc + slot * row + head_off, kv.v_scale + scale_off, vd, shape.head_dim, shape.group_size);
    k_rows[i] = kd;
    v_rows[i] = vd;
  }
}

}  // namespace llmk::attention_cpu
