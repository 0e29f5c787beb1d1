#include "core/linear_layer.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace llmk {

LinearLayer::LinearLayer(std::unique_ptr<LinearImpl> whole, std::shared_ptr<const OutlierCsr> outliers) {
  parts_.push_back(Part{std::move(whole), 0, std::move(outliers)});
}

LinearLayer::LinearLayer(std::vector<Part> parts, uint32_t max_rows, std::shared_ptr<LinearWorkspace> staging)
    : parts_(std::move(parts)), staging_(std::move(staging)) {
  if (parts_.empty()) throw Error(ErrorCode::internal, "a linear layer needs at least one part");
  uint32_t widest = 0;
  for (const Part& p : parts_) {
    out_features_ += p.out_features;
    widest = std::max(widest, p.out_features);
  }
  if (parts_.size() > 1) staging_->require(static_cast<size_t>(std::max<uint32_t>(max_rows, 1)) * widest * sizeof(float));
}

void LinearLayer::forward(const void* x, void* y, uint32_t num_rows, void* stream) {
  if (parts_.size() == 1) {
    const Part& p = parts_.front();
    p.impl->forward(x, y, num_rows, stream);
    if (p.outliers)
      p.outliers->add_product(static_cast<const float*>(x), num_rows, static_cast<float*>(y), p.outliers->num_rows());
    return;
  }
  auto* out = static_cast<float*>(y);
  auto* part_y = static_cast<float*>(staging_->data());
  size_t column = 0;
  for (Part& p : parts_) {
    p.impl->forward(x, part_y, num_rows, stream);
    if (p.outliers) p.outliers->add_product(static_cast<const float*>(x), num_rows, part_y, p.out_features);
    for (uint32_t r = 0; r < num_rows; ++r)
      std::memcpy(out + static_cast<size_t>(r) * out_features_ + column, part_y + static_cast<size_t>(r) * p.out_features,
                  p.out_features * sizeof(float));
    column += p.out_features;
  }
}

size_t LinearLayer::weight_bytes() const {
  size_t total = 0;
  for (const Part& p : parts_) total += p.impl->weight_bytes() + (p.outliers ? p.outliers->bytes() : 0);
  return total;
}

}  // namespace llmk
