#include "core/shard_footprint.hpp"

#include <cstdlib>

#include "core/error.hpp"
#include "core/gguf_types.hpp"

namespace llmk {

namespace {

// The layer index of "model.layers.<i>.<rest>", with rest; nullopt otherwise.
std::optional<std::pair<int32_t, std::string>> layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return std::nullopt;
  return std::pair{static_cast<int32_t>(std::atoi(name.c_str() + prefix.size())), name.substr(dot + 1)};
}

}  // namespace

std::optional<std::vector<int64_t>> shard_tensor_shape(const ModelConfig& m, const ModelShard& s,
                                                       const std::string& name, const std::vector<int64_t>& shape) {
  const TensorShard& t = s.tensor;
  const int64_t q = static_cast<int64_t>(t.q_heads) * m.head_dim, kv = static_cast<int64_t>(t.kv_heads) * m.head_dim;
  auto with_rows = [&](int64_t rows) {
    std::vector<int64_t> cut = shape;
    cut[0] = rows;
    return cut;
  };
  auto with_columns = [&](int64_t columns) {
    std::vector<int64_t> cut = shape;
    cut.back() = columns;
    return cut;
  };
  if (name == "model.embed_tokens.weight") {
    if (!s.first_stage() && !(s.last_stage() && m.tie_word_embeddings)) return std::nullopt;
    return with_rows(t.vocab_count);
  }
  if (name == "lm_head.weight") {
    if (!s.last_stage()) return std::nullopt;
    return with_rows(t.vocab_count);
  }
  if (name == "model.norm.weight") {
    if (!s.last_stage()) return std::nullopt;
    return shape;
  }
  const auto layer = layer_of(name);
  if (!layer) return shape;
  const auto& [index, rest] = *layer;
  if (index < s.layers.first || index >= s.layers.last) return std::nullopt;
  if (rest == "self_attn.q_proj.weight" || rest == "self_attn.q_proj.bias") return with_rows(q);
  if (rest == "self_attn.k_proj.weight" || rest == "self_attn.k_proj.bias" || rest == "self_attn.v_proj.weight" ||
      rest == "self_attn.v_proj.bias")
    return with_rows(kv);
  if (rest == "self_attn.o_proj.weight") return with_columns(q);
  if (rest == "mlp.gate_proj.weight" || rest == "mlp.up_proj.weight") return with_rows(t.inter_count);
  if (rest == "mlp.down_proj.weight") return with_columns(t.inter_count);
  return shape;  // the norms
}

ShardWeights shard_weights(const ModelConfig& m, const ModelShard& s, const std::map<std::string, TensorView>& tensors) {
  ShardWeights w;
  for (const auto& [name, view] : tensors) {
    const auto cut = shard_tensor_shape(m, s, name, view.shape);
    if (!cut || cut->empty()) continue;
    const int64_t columns = cut->back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < cut->size(); ++i) rows *= (*cut)[i];
    if (columns != view.shape.back() && is_ggml_dtype(view.dtype)) {
      // A column range must start and end on a block (core/parallel.hpp's TensorSlices::columns).
      const GgmlTypeInfo* info = ggml_type_info(ggml_type_of(view.dtype));
      const int64_t block = info != nullptr ? info->block_size : 1;
      if (columns % block != 0)
        throw Error(ErrorCode::invalid_config,
                    name + " is stored as " + dtype_name(view.dtype) + " blocks of " + std::to_string(block) +
                        " values: parallel.tensor " + std::to_string(s.tensor.degree) + " gives each rank " +
                        std::to_string(columns) + " of its " + std::to_string(view.shape.back()) +
                        " input columns, which cuts a block");
    }
    w.num_params += rows * columns;
    w.bytes += rows * static_cast<int64_t>(dtype_bytes(view.dtype, columns));
  }
  return w;
}

std::map<std::string, TensorView> dummy_tensors(const ModelConfig& model) {
  std::map<std::string, TensorView> out;
  for (const auto& [name, shape] : expected_tensors(model)) {
    TensorView v;
    v.name = name;
    v.dtype = model.dtype;
    v.shape = shape;
    out.emplace(name, std::move(v));
  }
  return out;
}

}  // namespace llmk
