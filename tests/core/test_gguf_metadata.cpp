// GGUF metadata to a model config and to tokenizer data, on hand-made
// files: every missing, mistyped or inconsistent key is refused by name.
#include <catch2/catch.hpp>

#include <memory>

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_test_support.hpp"
#include "core/gguf_tokenizer.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;

TEST_CASE("GGUF metadata that cannot make a model config is refused naming the key", "[gguf][errors]") {
  auto config_error = [](const GgufBytes& b) -> std::string {
    try {
      const GgufFile f(reinterpret_cast<const uint8_t*>(b.bytes.data()), b.bytes.size(), "mem.gguf");
      gguf_model_config(f);
    } catch (const Error& e) {
      return e.what();
    }
    FAIL("accepted");
    return "";
  };
  // A llama header with these integer keys (u32) and string keys.
  using Ints = std::vector<std::pair<std::string, uint32_t>>;
  using Strings = std::vector<std::pair<std::string, std::string>>;
  auto llama = [](const Ints& ints, const Strings& strings = {}) {
    GgufBytes b;
    b.u32(GgufFile::kMagic).u32(3).u64(0).u64(ints.size() + strings.size() + 2);
    b.kv_str("general.architecture", "llama");
    b.str("llama.attention.layer_norm_rms_epsilon").u32(6).f32(1e-5f);
    for (const auto& [k, v] : ints) b.kv_u32(k, v);
    for (const auto& [k, v] : strings) b.kv_str(k, v);
    return b;
  };
  const Ints base = {{"llama.context_length", 128},      {"llama.embedding_length", 32},
                     {"llama.block_count", 2},           {"llama.feed_forward_length", 64},
                     {"llama.attention.head_count", 4}, {"llama.vocab_size", 48}};
  auto without = [&](const std::string& key) {
    Ints out;
    for (const auto& kv : base)
      if (kv.first != key) out.push_back(kv);
    return out;
  };
  auto plus = [&](Ints ints, const std::string& key, uint32_t v) {
    ints.emplace_back(key, v);
    return ints;
  };
  {
    const GgufBytes ok = llama(base);
    const GgufFile f(reinterpret_cast<const uint8_t*>(ok.bytes.data()), ok.bytes.size(), "mem.gguf");
    const ModelConfig c = gguf_model_config(f);
    CHECK(c.num_kv_heads == 4);
    CHECK(c.head_dim == 8);
    CHECK(c.max_position_embeddings == 128);
    CHECK(c.rms_norm_eps == 1e-5f);
    CHECK(c.rope_theta == 10000.0f);
    CHECK(c.tie_word_embeddings);  // no output.weight
  }
  CHECK_THAT(config_error(llama(plus(base, "llama.attention.head_count_kv", 3))),
             Contains("'llama.attention.head_count_kv' = 3 does not divide"));
  CHECK_THAT(config_error(llama(without("llama.block_count"))),
             Contains("mem.gguf: metadata key 'llama.block_count' is missing"));
  CHECK_THAT(config_error(llama(without("llama.block_count"), {{"llama.block_count", "two"}})),
             Contains("'llama.block_count' is a string, not an integer"));
  CHECK_THAT(config_error(llama(plus(without("llama.embedding_length"), "llama.embedding_length", 0))),
             Contains("'llama.embedding_length' = 0 is out of range"));
  CHECK_THAT(config_error(llama(base, {{"llama.rope.scaling.type", "yarn"}})),
             Contains("rope.scaling.type 'yarn' is not supported"));
  CHECK_THAT(config_error(llama(plus(base, "llama.rope.dimension_count", 4))), Contains("partial rotary"));
  GgufBytes other;
  other.u32(GgufFile::kMagic).u32(3).u64(0).u64(1).kv_str("general.architecture", "gpt2");
  CHECK_THAT(config_error(other), Contains("general.architecture 'gpt2' is not supported (llama, qwen2)"));
  GgufBytes none;
  none.u32(GgufFile::kMagic).u32(3).u64(0).u64(0);
  CHECK_THAT(config_error(none), Contains("'general.architecture' is missing"));
}

TEST_CASE("a GGUF BPE vocabulary is read for the byte-level tokenizer, and refused by the sentencepiece one",
          "[gguf][tokenizer]") {
  GgufBytes b;
  b.u32(GgufFile::kMagic).u32(3).u64(0).u64(5);
  b.kv_str("tokenizer.ggml.model", "gpt2").kv_str("tokenizer.ggml.pre", "qwen2");
  b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3).str("a").str("b").str("ab");
  b.str("tokenizer.ggml.merges").u32(9).u32(8).u64(1).str("a b");
  b.kv_u32("tokenizer.ggml.eos_token_id", 2);
  const GgufFile f(reinterpret_cast<const uint8_t*>(b.bytes.data()), b.bytes.size(), "mem.gguf");
  const GgufBpeVocab v = gguf_bpe_vocab(f);
  CHECK(v.tokens == std::vector<std::string>{"a", "b", "ab"});
  CHECK(v.merges == std::vector<std::string>{"a b"});
  CHECK(v.pre_tokenizer == "qwen2");
  CHECK(v.eos_id == 2);
  CHECK(v.bos_id == -1);
  CHECK(v.token_types == std::vector<int32_t>{1, 1, 1});
  CHECK_THROWS_WITH(gguf_sentencepiece_model_proto(f), Contains("'gpt2'") && Contains("not sentencepiece"));

  GgufBytes bad;
  bad.u32(GgufFile::kMagic).u32(3).u64(0).u64(3);
  bad.kv_str("tokenizer.ggml.model", "llama");
  bad.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("<unk>").str("a");
  bad.str("tokenizer.ggml.scores").u32(9).u32(6).u64(1).f32(0);
  const GgufFile g(reinterpret_cast<const uint8_t*>(bad.bytes.data()), bad.bytes.size(), "mem.gguf");
  CHECK_THROWS_WITH(gguf_sentencepiece_model_proto(g),
                    Contains("'tokenizer.ggml.scores' has 1 entries but there are 2 tokens"));
}

TEST_CASE("a GGUF block_count the file's tensors cannot hold is refused before anything is listed", "[gguf][errors]") {
  GgufBytes b;
  b.u32(GgufFile::kMagic).u32(3).u64(1).u64(8);
  b.kv_str("general.architecture", "llama");
  b.str("llama.attention.layer_norm_rms_epsilon").u32(6).f32(1e-5f);
  b.kv_u32("llama.context_length", 128).kv_u32("llama.embedding_length", 8).kv_u32("llama.block_count", 2000000000);
  b.kv_u32("llama.feed_forward_length", 16).kv_u32("llama.attention.head_count", 2).kv_u32("llama.vocab_size", 4);
  b.tensor("token_embd.weight", {8, 4}, 0, 0).pad_to(32);
  b.bytes.append(128, '\0');
  auto file = std::make_unique<GgufFile>(reinterpret_cast<const uint8_t*>(b.bytes.data()), b.bytes.size(), "mem.gguf");
  CHECK_THROWS_WITH(load_gguf_checkpoint(std::move(file)),
                    Contains("mem.gguf: metadata says 2000000000 layers") && Contains("the file holds 1"));
}
