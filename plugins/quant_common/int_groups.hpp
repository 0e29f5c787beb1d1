// Weights handed over already quantized in groups (linear API 3.2,
// llmk_linear_int_groups: a GPTQ or AWQ checkpoint's integers): the checks
// a plugin makes before taking one, and the gather of x by the weight's
// input order (act-order GPTQ) into the front of the workspace.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "plugins/quant_common/linear_options.hpp"

namespace llmk::quant {

inline bool is_int_groups(const llmk_linear_desc& d) {
  return d.weight_dtype == LLMK_DTYPE_INT4_GROUPS || d.weight_dtype == LLMK_DTYPE_INT8_GROUPS;
}

// The desc's llmk_linear_int_groups, consistent with the desc; a reason in
// `why` and nullptr when not (or when its bits are not `bits`).
inline const llmk_linear_int_groups* int_groups_of(const llmk_linear_desc& d, uint32_t bits, std::string& why) {
  const std::string name = linear_options::layer_name(d);
  const auto* w = static_cast<const llmk_linear_int_groups*>(d.weight);
  const uint32_t want = d.weight_dtype == LLMK_DTYPE_INT4_GROUPS ? 4 : 8;
  if (w == nullptr || w->bits != want) {
    why = name + ": int groups weight missing or its bits do not match its dtype";
    return nullptr;
  }
  if (w->bits != bits) {
    why = name + ": " + std::to_string(w->bits) + "-bit integer groups; this plugin takes " + std::to_string(bits) +
          "-bit ones";
    return nullptr;
  }
  if (w->out_features != d.out_features || w->in_features != d.in_features || w->q == nullptr ||
      w->scales == nullptr || w->zeros == nullptr) {
    why = name + ": int groups weight does not match the desc's shape";
    return nullptr;
  }
  if (w->group_size == 0 || d.in_features % w->group_size != 0) {
    why = name + ": group_size " + std::to_string(w->group_size) + " does not divide in_features " +
          std::to_string(d.in_features);
    return nullptr;
  }
  if (w->input_order != nullptr) {
    std::vector<bool> seen(d.in_features, false);
    for (uint32_t k = 0; k < d.in_features; ++k) {
      const uint32_t c = w->input_order[k];
      if (c >= d.in_features || seen[c]) {
        why = name + ": input_order is not a permutation of the inputs (entry " + std::to_string(k) + ")";
        return nullptr;
      }
      seen[c] = true;
    }
  }
  const size_t params = static_cast<size_t>(d.out_features) * (d.in_features / w->group_size);
  for (size_t i = 0; i < params; ++i)
    if (w->zeros[i] >> bits) {
      why = name + ": zero point " + std::to_string(w->zeros[i]) + " is outside 0.." + std::to_string((1 << bits) - 1);
      return nullptr;
    }
  return w;
}

// q[n, k] of an llmk_linear_int_groups.
inline uint32_t int_groups_q(const llmk_linear_int_groups& w, int64_t n, int64_t k) {
  const size_t i = static_cast<size_t>(n) * w.in_features + static_cast<size_t>(k);
  return w.bits == 8 ? w.q[i] : (w.q[i / 2] >> (4 * (i % 2))) & 0xfu;
}

// x gathered by an input order: xg[r, k] = x[r, order[k]], in front of the
// workspace (64-byte multiple); the rest of the workspace follows.
class InputGather {
 public:
  InputGather() = default;
  explicit InputGather(const llmk_linear_int_groups& w)
      : in_(w.in_features),
        order_(w.input_order != nullptr ? std::vector<uint32_t>(w.input_order, w.input_order + w.in_features)
                                        : std::vector<uint32_t>()) {}
  bool active() const { return !order_.empty(); }
  size_t bytes(uint32_t num_rows) const {
    return active() ? (static_cast<size_t>(num_rows) * in_ * sizeof(float) + 63) / 64 * 64 : 0;
  }
  // The x to multiply (x itself, or its gathered copy in the workspace).
  const float* apply(const float* x, uint32_t num_rows, void* workspace) const {
    if (!active()) return x;
    auto* out = static_cast<float*>(workspace);
    for (int64_t r = 0; r < num_rows; ++r)
      for (int64_t k = 0; k < in_; ++k) out[r * in_ + k] = x[r * in_ + order_[k]];
    return out;
  }

 private:
  int64_t in_ = 0;
  std::vector<uint32_t> order_;
};

}  // namespace llmk::quant
