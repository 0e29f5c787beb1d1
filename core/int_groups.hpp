// Weights quantized in groups along in_features with scales and integer zero
// points, as GPTQ and AWQ checkpoints store them (core/gptq_checkpoint.hpp)
// and `llmk quantize` writes them: the host side of linear API 3.2's
// llmk_linear_int_groups (plugins/api/llmk_linear.h), which a TensorView of
// DType::int4_groups / int8_groups points at.
#pragma once

#include <cstdint>
#include <string>
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

// SpQR-style outliers of one [out, in] weight (`llmk quantize --outliers`),
// kept beside its integer groups in higher precision and added to them:
// w[n, cols[j]] += values[j] for j in [row_ptr[n], row_ptr[n + 1]). cols are
// the model's input columns (x's, whatever the groups' input order),
// strictly increasing within a row. The linear layer adds the sparse product
// x * outliers^T to the plugin's output (core/linear_layer.hpp).
struct OutlierCsr {
  int64_t in_features = 0;
  std::vector<uint32_t> row_ptr;  // [out + 1], row_ptr[0] = 0, non-decreasing, row_ptr[out] = size()
  std::vector<uint32_t> cols;     // [size()], each < in
  std::vector<float> values;      // [size()]

  size_t size() const { return cols.size(); }
  int64_t num_rows() const { return row_ptr.empty() ? 0 : static_cast<int64_t>(row_ptr.size()) - 1; }
  size_t bytes() const { return (row_ptr.size() + cols.size() + values.size()) * 4; }
  // What is wrong with it as the outliers of an [out, in_features] weight, "" when nothing; `which`
  // is set to "row_ptr", "cols" or "values", the part at fault.
  std::string problem(int64_t out, std::string& which) const;
  // w [out, in_features]: each outlier added to its weight.
  void add_to(float* w) const;
  // y[r, n] += sum_j values[j] * x[r, cols[j]] over n's outliers; x [rows, in_features], y [rows,
  // ld_y] (its first num_rows() columns), the output rows split over OpenMP's threads.
  void add_product(const float* x, int64_t rows, float* y, int64_t ld_y) const;
};

// out: [out_features, in_features] floats in the model's column order:
// out[n, order(k)] = scale * (q[n, k] - zero), each product rounded once.
void dequantize_int_groups(const llmk_linear_int_groups& w, float* out);

}  // namespace llmk
