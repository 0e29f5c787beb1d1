// Embeddings from a causal Llama-family model: the final hidden states (after
// the model's last RMSNorm, before lm_head) of an input's prompt rows, pooled
// into one vector per input, optionally truncated and L2-normalised.
//
// Model::forward_hidden (core/model.hpp) yields the rows; an
// EmbeddingPooler takes them chunk by chunk as a chunked prefill produces
// them, so a long input never holds more than one chunk of rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmk {

struct ModelConfig;  // core/model_config.hpp

enum class Pooling {
  mean,  // the average over every position of the input
  last,  // the last position's row (it attends to the whole input)
};
const char* to_string(Pooling p) noexcept;
std::optional<Pooling> parse_pooling(std::string_view name);

// The pooling a family's embeddings use when a request names none: `last`
// for every causal family llmk loads (Llama, Mistral, Qwen2): only the last
// row of a causal model has seen the whole input, and it is the pooling of
// the embedding models built on these families (e5-mistral, gte-Qwen2) and
// vLLM's default when it serves a causal model as an embedding model.
Pooling default_pooling(const ModelConfig& model);

struct EmbeddingParams {
  Pooling pooling = Pooling::last;
  bool normalize = true;   // to unit L2 length, as OpenAI's vectors are
  int32_t dimensions = 0;  // keep the first `dimensions` values (0: all), then normalise
};

// Throws FieldError(invalid_argument) naming "dimensions" when it is outside
// [0, hidden_size] (0 meaning the whole vector).
void validate_embedding_params(const EmbeddingParams& params, int32_t hidden_size);

// One input's pooling, fed its rows in position order.
class EmbeddingPooler {
 public:
  EmbeddingPooler(int32_t hidden_size, const EmbeddingParams& params);
  // rows: [num_rows, hidden_size], the next positions of the input.
  void add(const float* rows, int64_t num_rows);
  int64_t num_rows() const { return num_rows_; }
  // The pooled, truncated and (when asked) normalised vector. Throws
  // Error(invalid_argument) when no row was added.
  std::vector<float> finish() const;

 private:
  int32_t hidden_size_;
  EmbeddingParams params_;
  int64_t num_rows_ = 0;
  std::vector<double> sum_;  // [hidden_size]; mean pooling
  std::vector<float> last_;  // [hidden_size]; last pooling
};

// The vector as OpenAI's `encoding_format: base64` sends it: the raw
// little-endian float32 bytes, base64-encoded (RFC 4648, padded).
std::string encode_base64_f32(const std::vector<float>& values);

}  // namespace llmk
