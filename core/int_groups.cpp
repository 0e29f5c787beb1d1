#include "core/int_groups.hpp"

#include <algorithm>

namespace llmk {

IntGroupsWeight::IntGroupsWeight(uint32_t bits_, uint32_t group_size_, uint32_t out_features_, uint32_t in_features_)
    : bits(bits_), group_size(group_size_), out_features(out_features_), in_features(in_features_) {
  const size_t values = static_cast<size_t>(out_features) * in_features;
  q.assign(bits == 8 ? values : (values + 1) / 2, 0);
  scales.assign(static_cast<size_t>(out_features) * num_groups(), 0.0f);
  zeros.assign(scales.size(), 0);
}

const llmk_linear_int_groups* IntGroupsWeight::header() {
  header_.bits = bits;
  header_.group_size = group_size;
  header_.out_features = out_features;
  header_.in_features = in_features;
  header_.q = q.data();
  header_.scales = scales.data();
  header_.zeros = zeros.data();
  header_.input_order = input_order.empty() ? nullptr : input_order.data();
  return &header_;
}

void dequantize_int_groups(const llmk_linear_int_groups& w, float* out) {
  const int64_t in = w.in_features, groups = in / w.group_size;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < static_cast<int64_t>(w.out_features); ++n) {
    for (int64_t k = 0; k < in; ++k) {
      const size_t i = static_cast<size_t>(n * in + k);
      const int32_t q = w.bits == 8 ? w.q[i] : (w.q[i / 2] >> (4 * (i % 2))) & 0xf;
      const size_t g = static_cast<size_t>(n * groups + k / w.group_size);
      const int64_t col = w.input_order != nullptr ? w.input_order[k] : k;
      out[n * in + col] = w.scales[g] * static_cast<float>(q - static_cast<int32_t>(w.zeros[g]));
    }
  }
}

std::string OutlierCsr::problem(int64_t out, std::string& which) const {
  const int64_t in = in_features;
  which = "row_ptr";
  if (static_cast<int64_t>(row_ptr.size()) != out + 1)
    return "length " + std::to_string(row_ptr.size()) + ", expected " + std::to_string(out + 1) +
           " (one per output row, plus one)";
  if (row_ptr.front() != 0) return "row_ptr[0] = " + std::to_string(row_ptr.front()) + ", expected 0";
  for (int64_t n = 0; n < out; ++n)
    if (row_ptr[n + 1] < row_ptr[n])
      return "not monotonic: row_ptr[" + std::to_string(n + 1) + "] = " + std::to_string(row_ptr[n + 1]) +
             " < row_ptr[" + std::to_string(n) + "] = " + std::to_string(row_ptr[n]);
  if (row_ptr.back() != cols.size()) {
    which = "cols";
    return "length " + std::to_string(cols.size()) + ", but row_ptr[" + std::to_string(out) + "] = " +
           std::to_string(row_ptr.back());
  }
  if (values.size() != cols.size()) {
    which = "values";
    return "length " + std::to_string(values.size()) + ", but cols has " + std::to_string(cols.size());
  }
  which = "cols";
  for (int64_t n = 0; n < out; ++n)
    for (uint32_t j = row_ptr[n]; j < row_ptr[n + 1]; ++j) {
      if (cols[j] >= in)
        return "cols[" + std::to_string(j) + "] = " + std::to_string(cols[j]) + " (row " + std::to_string(n) +
               ") is outside 0.." + std::to_string(in - 1);
      if (j > row_ptr[n] && cols[j] <= cols[j - 1])
        return "row " + std::to_string(n) + " is not in increasing column order at cols[" + std::to_string(j) + "]";
    }
  which.clear();
  return "";
}

void OutlierCsr::add_to(float* w) const {
  const int64_t in = in_features;
  for (int64_t n = 0; n < num_rows(); ++n)
    for (uint32_t j = row_ptr[n]; j < row_ptr[n + 1]; ++j) w[n * in + cols[j]] += values[j];
}

void OutlierCsr::add_product(const float* x, int64_t rows, float* y, int64_t ld_y) const {
  const int64_t in = in_features;
  const int64_t out = num_rows();
#pragma omp parallel for schedule(static) if (size() * static_cast<size_t>(rows) > 16384)
  for (int64_t n = 0; n < out; ++n) {
    const uint32_t first = row_ptr[n], last = row_ptr[n + 1];
    if (first == last) continue;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float sum = 0.0f;
      for (uint32_t j = first; j < last; ++j) sum += values[j] * xr[cols[j]];
      y[r * ld_y + n] += sum;
    }
  }
}

}  // namespace llmk
