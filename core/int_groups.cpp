#include "core/int_groups.hpp"

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

}  // namespace llmk
