// core/shard_footprint.hpp: the share of each tensor a rank keeps, against
// the engine's own cut (core/parallel.hpp's TensorSlices, which loading
// uses) and against the whole tensors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gguf_types.hpp"
#include "core/parallel.hpp"
#include "core/shard_footprint.hpp"

using namespace llmk;

namespace {

// One layer, hidden 64, 4 heads of 16, MLP 128, vocabulary 100 (not a
// multiple of 3 or 8: the last rank's rows are fewer).
ModelConfig small_model() {
  ModelConfig m;
  m.hidden_size = 64;
  m.num_layers = 1;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate_size = 128;
  m.vocab_size = 100;
  return m;
}

}  // namespace

TEST_CASE("every rank's rows and columns of each tensor add up to the whole tensor", "[shard_footprint]") {
  const ModelConfig m = small_model();
  const auto tensors = dummy_tensors(m);
  for (int32_t degree : {1, 2, 4}) {
    std::map<std::string, int64_t> kept;  // values of each tensor summed over the ranks
    for (int32_t rank = 0; rank < degree; ++rank) {
      const ModelShard shard = model_shard(m, degree, 1, rank);
      for (const auto& [name, t] : tensors) {
        const auto shape = shard_tensor_shape(m, shard, name, t.shape);
        REQUIRE(shape);  // one stage: every rank uses every tensor
        int64_t n = 1;
        for (int64_t d : *shape) n *= d;
        kept[name] += n;
      }
    }
    INFO("degree " << degree);
    for (const auto& [name, t] : tensors) {
      INFO(name);
      // KV heads split (2 KV heads: degree 4 repeats each on 2 ranks), norms whole on every rank.
      const bool norm = name.find("norm") != std::string::npos;
      const bool kv = name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos;
      const int64_t copies = norm ? degree : kv && degree > m.num_kv_heads ? degree / m.num_kv_heads : 1;
      CHECK(kept[name] == copies * t.numel());
    }
  }
}

TEST_CASE("a column range that cuts a ggml block is refused where loading refuses it", "[shard_footprint]") {
  ModelConfig m = small_model();
  m.num_heads = 8;  // heads of 8 values: o_proj's 64 input columns are 2 blocks of 32
  m.head_dim = 8;
  m.num_kv_heads = 8;
  auto tensors = dummy_tensors(m);
  TensorView& o = tensors.at("model.layers.0.self_attn.o_proj.weight");
  o.dtype = ggml_dtype(static_cast<uint32_t>(GgmlType::q4_0));
  std::vector<uint8_t> blocks(dtype_bytes(o.dtype, o.numel()));
  o.data = blocks.data();
  for (int32_t degree : {1, 2, 4, 8}) {
    INFO("degree " << degree);
    const ModelShard shard = model_shard(m, degree, 1, 0);
    bool engine_refuses = false;
    try {
      TensorSlices slices;
      const int64_t count = shard.tensor.q_heads * m.head_dim;
      slices.columns(o, shard.tensor.q_head_first * m.head_dim, count);
    } catch (const Error& e) {
      engine_refuses = true;
      CHECK(e.code() == ErrorCode::invalid_config);
    }
    CHECK(engine_refuses == (degree > 2));  // 32 columns per rank at degree 2, 16 at 4
    if (engine_refuses) {
      CHECK_THROWS_WITH(shard_weights(m, shard, tensors),
                        Catch::Contains("model.layers.0.self_attn.o_proj.weight") && Catch::Contains("Q4_0") &&
                            Catch::Contains("cuts a block"));
    } else {
      // Half the blocks of each row at degree 2: 64 rows x 1 block of 18 bytes.
      const ShardWeights w = shard_weights(m, shard, tensors);
      CHECK(w.bytes > 0);
      if (degree == 2) {
        const ShardWeights whole = shard_weights(m, model_shard(m, 1, 1, 0), tensors);
        CHECK(whole.bytes - w.bytes ==
              64 * 18 + (whole.num_params - w.num_params - 64 * 32) * 4);  // o_proj's other half, the rest f32
      }
    }
  }
}

TEST_CASE("pipeline stages keep their layers; the embedding goes to the first, the head and final norm to the last",
          "[shard_footprint]") {
  ModelConfig m = small_model();
  m.num_layers = 3;
  const auto tensors = dummy_tensors(m);
  const ModelShard first = model_shard(m, 1, 2, 0), last = model_shard(m, 1, 2, 1);
  CHECK(shard_tensor_shape(m, first, "model.embed_tokens.weight", {100, 64}));
  CHECK_FALSE(shard_tensor_shape(m, last, "model.embed_tokens.weight", {100, 64}));
  CHECK_FALSE(shard_tensor_shape(m, first, "lm_head.weight", {100, 64}));
  CHECK(shard_tensor_shape(m, last, "lm_head.weight", {100, 64}));
  CHECK_FALSE(shard_tensor_shape(m, first, "model.norm.weight", {64}));
  CHECK(shard_tensor_shape(m, first, "model.layers.1.input_layernorm.weight", {64}));  // layers [0, 2)
  CHECK_FALSE(shard_tensor_shape(m, last, "model.layers.1.input_layernorm.weight", {64}));
  CHECK(shard_tensor_shape(m, last, "model.layers.2.mlp.down_proj.weight", {64, 128}));
  m.tie_word_embeddings = true;  // the last stage's lm_head is the embedding's rows
  CHECK(shard_tensor_shape(m, last, "model.embed_tokens.weight", {100, 64}));
  // Vocabulary rows at tensor 3: 34, 34 and the last 32.
  m.num_heads = 3;
  m.num_kv_heads = 3;
  m.intermediate_size = 96;
  const ModelShard third = model_shard(m, 3, 1, 2);
  CHECK(*shard_tensor_shape(m, third, "model.embed_tokens.weight", {100, 64}) == std::vector<int64_t>{32, 64});
}
