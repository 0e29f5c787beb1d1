// What one rank of a tensor x pipeline job holds of a model, worked out from
// shapes alone (no job, no weights read): `llmk info` and `llmk estimate`
// size each rank with it. The cut is the one load_weights makes
// (core/model_weights.cpp) from core/parallel.hpp's shard: q/k/v (and their
// biases) and gate/up keep their rank's output rows, o_proj and down_proj its
// input columns, the embedding and lm_head its vocabulary rows; the norms are
// whole on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/model_config.hpp"
#include "core/parallel.hpp"

namespace llmk {

// The shape the rank holding `shard` keeps of checkpoint tensor `name` (whole
// shape `shape`), or nullopt when the rank does not use it: another stage's
// layers, the embedding past the first stage (the last keeps it too when
// lm_head is tied to it), lm_head and the final norm before the last stage.
// A tensor this function does not know is whole on every rank.
std::optional<std::vector<int64_t>> shard_tensor_shape(const ModelConfig& model, const ModelShard& shard,
                                                       const std::string& name, const std::vector<int64_t>& shape);

struct ShardWeights {
  int64_t num_params = 0;  // values the rank holds
  int64_t bytes = 0;       // in the tensors' stored dtypes (ggml blocks included)
};

// Sums shard_tensor_shape over `tensors` (a checkpoint's, or
// dummy_tensors()). Throws Error(invalid_config) naming the tensor when the
// input columns of a rank cut a ggml block, as loading would.
ShardWeights shard_weights(const ModelConfig& model, const ModelShard& shard,
                           const std::map<std::string, TensorView>& tensors);

// The tensors a dummy checkpoint of `model` has (expected_tensors, in
// model.dtype, without data).
std::map<std::string, TensorView> dummy_tensors(const ModelConfig& model);

}  // namespace llmk
