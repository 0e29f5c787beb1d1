// The /v1/embeddings request and response shapes (OpenAI's): a body to the
// inputs and their EmbeddingParams (core/embedding.hpp), pooled vectors to
// the response object. No sockets and no engine here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/embedding.hpp"
#include "ipc/backend.hpp"

namespace llmk::ipc {

// One input: text for the engine to tokenize, or token ids.
struct EmbeddingInput {
  std::string text;
  std::vector<int32_t> token_ids;  // used when non-empty
};

struct EmbeddingsRequest {
  std::vector<EmbeddingInput> inputs;
  EmbeddingParams params;  // dimensions 0: the whole hidden state
  bool base64 = false;     // encoding_format "base64" (else "float")
};

// At most this many inputs in one request (OpenAI's own limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// `input` as OpenAI accepts it: a string, a list of strings, a list of token
// ids or a list of such lists; each non-empty, ids inside the vocabulary,
// id lists no longer than the context. `dimensions` >= 1 (its upper bound,
// the hidden size, is the engine's check); `encoding_format` float or
// base64; llmk's `pooling` (mean, last; default `default_pooling`) and
// `normalize` (default true). Throws ProtocolError(malformed) for a body
// that is not a JSON object, ParamError naming the field otherwise,
// Error(not_found) for another model's name.
EmbeddingsRequest parse_embeddings_request(const std::string& body, const Backend& backend, Pooling default_pooling);
// The same fields of a parsed JSON object (the ZeroMQ "embed" message
// carries them beside its own): ParamError naming the field, or
// Error(not_found) for another model's name.
EmbeddingsRequest parse_embeddings_fields(const nlohmann::json& body, const ModelInfo& model,
                                          Pooling default_pooling);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//  "model", "usage": {"prompt_tokens", "total_tokens"}}; each embedding a
// list of floats, or with base64 its little-endian float32 bytes in base64.
nlohmann::json embeddings_response(const std::vector<std::vector<float>>& vectors, bool base64,
                                   const std::string& model, int32_t prompt_tokens);

}  // namespace llmk::ipc
