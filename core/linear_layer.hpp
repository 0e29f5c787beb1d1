// A linear layer of the forward as the executors call it: one plugin object
// over the whole output, or several over consecutive ranges of output
// features, each writing its columns of y. Several parts appear where a
// fused weight (q/k/v, gate/up) is stored in more than one type, as
// llama.cpp's Q4_K_M files store v_proj in Q6_K beside a Q4_K q_proj, and
// each type is served by the plugin that computes on it. A part whose
// weight carries SpQR-style outliers (core/int_groups.hpp's OutlierCsr, a
// GPTQ folder written with `llmk quantize --outliers`) gets their sparse
// product added to what its plugin computed (CPU, F32 activations only:
// core/model_weights.cpp refuses them elsewhere).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/int_groups.hpp"
#include "core/plugin_loader.hpp"

namespace llmk {

class LinearLayer {
 public:
  struct Part {
    std::unique_ptr<LinearImpl> impl;
    uint32_t out_features = 0;
    std::shared_ptr<const OutlierCsr> outliers;  // nullptr: none; else one row per output of the part
  };
  // One part: the plugin's object as it is, on any device (outliers: CPU only).
  explicit LinearLayer(std::unique_ptr<LinearImpl> whole, std::shared_ptr<const OutlierCsr> outliers = nullptr);
  // Several parts (CPU, F32 activations): each part's rows go to `staging`
  // (shared by the layers of a model, grown here to max_rows rows of the
  // widest part) and are copied into their columns of y.
  LinearLayer(std::vector<Part> parts, uint32_t max_rows, std::shared_ptr<LinearWorkspace> staging);

  // As LinearImpl::forward: x [num_rows, in], y [num_rows, sum of the parts' out].
  void forward(const void* x, void* y, uint32_t num_rows, void* stream = nullptr);
  size_t weight_bytes() const;
  // The first part's plugin.
  const PluginInfo& info() const { return parts_.front().impl->info(); }
  const std::vector<Part>& parts() const { return parts_; }

 private:
  std::vector<Part> parts_;
  std::shared_ptr<LinearWorkspace> staging_;
  uint32_t out_features_ = 0;
};

}  // namespace llmk
