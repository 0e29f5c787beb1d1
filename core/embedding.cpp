#include "core/embedding.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/model_config.hpp"

namespace llmk {

const char* to_string(Pooling p) noexcept {
  switch (p) {
    case Pooling::mean: return "mean";
    case Pooling::last: return "last";
  }
  return "?";
}

std::optional<Pooling> parse_pooling(std::string_view name) {
  if (name == "mean") return Pooling::mean;
  if (name == "last") return Pooling::last;
  return std::nullopt;
}

Pooling default_pooling(const ModelConfig&) { return Pooling::last; }

void validate_embedding_params(const EmbeddingParams& params, int32_t hidden_size) {
  if (params.dimensions < 0 || params.dimensions > hidden_size)
    throw FieldError("dimensions", "dimensions must be between 1 and the model's hidden size " +
                                       std::to_string(hidden_size) + ", got " + std::to_string(params.dimensions));
}

EmbeddingPooler::EmbeddingPooler(int32_t hidden_size, const EmbeddingParams& params)
    : hidden_size_(hidden_size), params_(params) {
  validate_embedding_params(params, hidden_size);
  if (params.pooling == Pooling::mean) sum_.assign(static_cast<size_t>(hidden_size), 0.0);
  else last_.assign(static_cast<size_t>(hidden_size), 0.0f);
}

void EmbeddingPooler::add(const float* rows, int64_t num_rows) {
  if (num_rows <= 0) return;
  const int64_t h = hidden_size_;
  if (params_.pooling == Pooling::mean) {
    for (int64_t r = 0; r < num_rows; ++r)
      for (int64_t i = 0; i < h; ++i) sum_[static_cast<size_t>(i)] += rows[r * h + i];
  } else {
    std::memcpy(last_.data(), rows + (num_rows - 1) * h, static_cast<size_t>(h) * sizeof(float));
  }
  num_rows_ += num_rows;
}

std::vector<float> EmbeddingPooler::finish() const {
  if (num_rows_ == 0) throw Error(ErrorCode::invalid_argument, "embedding: the input has no tokens");
  const size_t dims = params_.dimensions > 0 ? static_cast<size_t>(params_.dimensions) : static_cast<size_t>(hidden_size_);
  std::vector<double> v(dims);
  for (size_t i = 0; i < dims; ++i)
    v[i] = params_.pooling == Pooling::mean ? sum_[i] / static_cast<double>(num_rows_) : last_[i];
  if (params_.normalize) {
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    if (norm > 0)
      for (double& x : v) x /= norm;
  }
  return std::vector<float>(v.begin(), v.end());
}

std::string encode_base64_f32(const std::vector<float>& values) {
  static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian float32");
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  const size_t n = values.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = bytes[i], b1 = i + 1 < n ? bytes[i + 1] : 0, b2 = i + 2 < n ? bytes[i + 2] : 0;
    const uint32_t triple = (b0 << 16) | (b1 << 8) | b2;
    out += alphabet[(triple >> 18) & 63];
    out += alphabet[(triple >> 12) & 63];
    out += i + 1 < n ? alphabet[(triple >> 6) & 63] : '=';
    out += i + 2 < n ? alphabet[triple & 63] : '=';
  }
  return out;
}

}  // namespace llmk
