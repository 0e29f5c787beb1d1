// Weights quantized in groups along in_features with scales and integer zero
// points, as GPTQ and AWQ checkpoints store them (core/gptq_checkpoint.hpp)
// and `llmk quantize` writes them: the host side of linear API 3.2's
// llmk_linear_int_groups (plugins/api/llmk_linear.h), which a TensorView of
// DType::int4_groups / int8_groups points at.
#pragma once

#include <cstdint>
#include <vector>

#include "plugins/api/llmk_linear.h"

namespace llmk {

// An llmk_linear_int_groups with its own storage. header() points into the
// vectors: keep the object where it is (hold it by pointer) once taken.
struct IntGroupsWeight {
  uint32_t bits = 4;
  uint32_t group_size = 0;
  uint32_t out_features = 0;
  uint32_t in_features = 0;
  std::vector<uint8_t> q;             // [out, in * bits / 8], 4 bits: low nibble first
  std::vector<float> scales;          // [out, in / group_size]
  std::vector<uint8_t> zeros;         // [out, in / group_size]
  std::vector<uint32_t> input_order;  // empty, or [in] (column k of q multiplies x[input_order[k]])

  // Sized for the shape, all zeros.
  IntGroupsWeight(uint32_t bits, uint32_t group_size, uint32_t out_features, uint32_t in_features);
  uint32_t num_groups() const { return in_features / group_size; }
  uint8_t q_at(int64_t n, int64_t k) const {
    const size_t i = static_cast<size_t>(n) * in_features + static_cast<size_t>(k);
    return bits == 8 ? q[i] : static_cast<uint8_t>((q[i / 2] >> (4 * (i % 2))) & 0xf);
  }
  void set_q(int64_t n, int64_t k, uint32_t v) {
    const size_t i = static_cast<size_t>(n) * in_features + static_cast<size_t>(k);
    if (bits == 8) {
      q[i] = static_cast<uint8_t>(v);
      return;
    }
    const int shift = 4 * static_cast<int>(i % 2);
    q[i / 2] = static_cast<uint8_t>((q[i / 2] & ~(0xf << shift)) | ((v & 0xf) << shift));
  }
  const llmk_linear_int_groups* header();

 private:
  llmk_linear_int_groups header_{};
};

// out: [out_features, in_features] floats in the model's column order:
// out[n, order(k)] = scale * (q[n, k] - zero), each product rounded once.
void dequantize_int_groups(const llmk_linear_int_groups& w, float* out);

}  // namespace llmk
