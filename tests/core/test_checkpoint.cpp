// Loading valid checkpoints: the shared stories260K model (checked byte for
// byte against an independent read of the file), synthesized single-file
// and sharded directories, and the open_model entry point.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/safetensors_writer.hpp"

using namespace llmk;
using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

const fs::path kStories = fs::path(LLMK_SHARED_DIR) / "models" / "stories260K";

// Reads a safetensors file with nothing but ifstream and the JSON parser:
// name -> (dtype, shape, bytes).
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::map<std::string, RawTensor> read_raw_safetensors(const fs::path& file) {
  const std::string all = read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);  // little-endian host
  const auto header = nlohmann::json::parse(all.substr(8, n));
  std::map<std::string, RawTensor> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
    out[name] = {v["dtype"], v["shape"].get<std::vector<int64_t>>(), all.substr(8 + n + begin, end - begin)};
  }
  return out;
}

void require_same_tensors(const Checkpoint& ckpt, const std::vector<TensorSpec>& written) {
  REQUIRE(ckpt.tensors().size() == written.size());
  for (const auto& t : written) {
    INFO(t.name);
    const TensorView& v = ckpt.tensor(t.name);
    CHECK(v.shape == t.shape);
    CHECK(v.nbytes() == t.data.size());
    CHECK(std::memcmp(v.data, t.data.data(), t.data.size()) == 0);
  }
}

}  // namespace

TEST_CASE("stories260K loads with its config.json values", "[checkpoint]") {
  const auto ckpt = load_checkpoint(kStories);
  const ModelConfig& c = ckpt->config();
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.hidden_size == 64);
  CHECK(c.intermediate_size == 172);
  CHECK(c.num_layers == 5);
  CHECK(c.num_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.vocab_size == 512);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.rms_norm_eps == 1e-5f);
  CHECK(c.rope_theta == 10000.0f);
  CHECK(c.tie_word_embeddings);
  CHECK(c.dtype == DType::f32);
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<int32_t>{2});
  CHECK(c.add_bos_token);
  CHECK_FALSE(c.sliding_window.has_value());
  CHECK(ckpt->tokenizer_path() == kStories / "tokenizer.model");
}

TEST_CASE("stories260K tensors are the file's bytes, with the config's shapes", "[checkpoint]") {
  const auto ckpt = load_checkpoint(kStories);
  const auto raw = read_raw_safetensors(kStories / "model.safetensors");
  REQUIRE(ckpt->tensors().size() == raw.size());
  REQUIRE(raw.size() == 1 + 5 * 9 + 1);  // embeddings, 9 per layer, final norm; lm_head tied
  size_t total = 0;
  for (const auto& [name, r] : raw) {
    INFO(name);
    const TensorView& v = ckpt->tensor(name);
    CHECK(v.dtype == DType::f32);
    CHECK(v.shape == r.shape);
    REQUIRE(v.nbytes() == r.bytes.size());
    CHECK(std::memcmp(v.data, r.bytes.data(), r.bytes.size()) == 0);
    CHECK(reinterpret_cast<uintptr_t>(v.data) % 4 == 0);
    total += r.bytes.size();
  }
  CHECK(ckpt->total_bytes() == total);
  CHECK(ckpt->tensor("model.layers.0.self_attn.k_proj.weight").shape == std::vector<int64_t>{32, 64});
  CHECK(ckpt->tensor("model.layers.4.mlp.down_proj.weight").shape == std::vector<int64_t>{64, 172});
  CHECK_FALSE(ckpt->has("lm_head.weight"));
  // The counted parameters agree with the closed form.
  CHECK(static_cast<int64_t>(total / 4) == ckpt->config().num_parameters());
}

TEST_CASE("asking for an absent tensor names it", "[checkpoint]") {
  const auto ckpt = load_checkpoint(kStories);
  try {
    ckpt->tensor("lm_head.weight");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::bad_checkpoint);
    CHECK_THAT(e.what(), Catch::Contains("'lm_head.weight'"));
  }
}

TEST_CASE("a synthesized single-file checkpoint round-trips every byte", "[checkpoint]") {
  TempDir dir;
  const ModelConfig cfg = tiny_llama_config();
  const auto written = write_model_dir(dir.path(), cfg, 7);
  const auto ckpt = load_checkpoint(dir.path());
  CHECK(ckpt->config() == cfg);
  require_same_tensors(*ckpt, written);
  CHECK(ckpt->has("lm_head.weight"));
  CHECK(ckpt->tokenizer_path().empty());  // no tokenizer.model in the directory
}

TEST_CASE("F16 and BF16 checkpoints keep their stored dtype", "[checkpoint]") {
  for (DType d : {DType::f16, DType::bf16}) {
    TempDir dir;
    ModelConfig cfg = tiny_llama_config();
    cfg.dtype = d;
    const auto written = write_model_dir(dir.path(), cfg, 3);
    const auto ckpt = load_checkpoint(dir.path());
    require_same_tensors(*ckpt, written);
    for (const auto& [name, v] : ckpt->tensors()) CHECK(v.dtype == d);
  }
}

TEST_CASE("a checkpoint may mix F32 norms with BF16 projections", "[checkpoint]") {
  TempDir dir;
  ModelConfig cfg = tiny_llama_config();
  cfg.dtype = DType::bf16;
  write_config_json(dir.path(), config_json(cfg));
  auto tensors = llama_tensors(cfg, 5);
  for (auto& t : tensors) {
    if (t.shape.size() == 1) {
      t.dtype = "F32";
      t.data = random_tensor_bytes("F32", numel_of(t.shape), 9);
    }
  }
  write_safetensors(dir.path() / "model.safetensors", tensors);
  const auto ckpt = load_checkpoint(dir.path());
  require_same_tensors(*ckpt, tensors);
  CHECK(ckpt->tensor("model.norm.weight").dtype == DType::f32);
  CHECK(ckpt->tensor("model.layers.1.mlp.up_proj.weight").dtype == DType::bf16);
}

TEST_CASE("a sharded checkpoint loads through model.safetensors.index.json", "[checkpoint]") {
  TempDir dir;
  const ModelConfig cfg = tiny_llama_config();
  const auto written = write_sharded_model_dir(dir.path(), cfg, 11, 3);
  const auto ckpt = load_checkpoint(dir.path());
  require_same_tensors(*ckpt, written);
}

TEST_CASE("rotary inv_freq buffers are ignored", "[checkpoint]") {
  TempDir dir;
  const ModelConfig cfg = tiny_llama_config();
  write_config_json(dir.path(), config_json(cfg));
  auto tensors = llama_tensors(cfg, 2);
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}, random_tensor_bytes("F32", 2, 1)});
  write_safetensors(dir.path() / "model.safetensors", tensors);
  const auto ckpt = load_checkpoint(dir.path());
  CHECK_FALSE(ckpt->has("model.layers.0.self_attn.rotary_emb.inv_freq"));
  CHECK(ckpt->tensors().size() == tensors.size() - 1);
}

TEST_CASE("with tied embeddings a stored lm_head.weight is checked and ignored", "[checkpoint]") {
  TempDir dir;
  ModelConfig cfg = tiny_llama_config();
  cfg.tie_word_embeddings = true;
  write_config_json(dir.path(), config_json(cfg));
  auto tensors = llama_tensors(cfg, 2);
  tensors.push_back({"lm_head.weight", "F32", {cfg.vocab_size, cfg.hidden_size},
                     random_tensor_bytes("F32", cfg.vocab_size * cfg.hidden_size, 4)});
  write_safetensors(dir.path() / "model.safetensors", tensors);
  const auto ckpt = load_checkpoint(dir.path());
  CHECK_FALSE(ckpt->has("lm_head.weight"));
  CHECK(ckpt->tensors().size() == tensors.size() - 1);
}

TEST_CASE("a tensor at a misaligned file offset is handed out aligned", "[checkpoint]") {
  TempDir dir;
  const ModelConfig cfg = tiny_llama_config();
  write_config_json(dir.path(), config_json(cfg));
  const auto tensors = llama_tensors(cfg, 8);
  std::string data;
  const std::string header = safetensors_header(tensors, data).dump() + " ";
  // No padding: the data buffer starts at an odd offset.
  std::string bytes(8, '\0');
  uint64_t len = header.size() + ((8 + header.size()) % 2 == 0 ? 1 : 0);
  std::string text = header;
  text.resize(len, ' ');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  REQUIRE((8 + len) % 4 != 0);
  write_file(dir.path() / "model.safetensors", bytes + text + data);
  const auto ckpt = load_checkpoint(dir.path());
  require_same_tensors(*ckpt, tensors);
  for (const auto& [name, v] : ckpt->tensors()) CHECK(reinterpret_cast<uintptr_t>(v.data) % 4 == 0);
}

TEST_CASE("open_model loads a directory and applies a tokenizer override", "[checkpoint]") {
  ModelSection s;
  s.path = kStories.string();
  auto ckpt = open_model(s);
  CHECK(ckpt->config().hidden_size == 64);
  CHECK(ckpt->tokenizer_path() == kStories / "tokenizer.model");

  s.tokenizer = (fs::path(LLMK_SHARED_DIR) / "models" / "llama2-tokenizer" / "tokenizer.model").string();
  ckpt = open_model(s);
  CHECK(ckpt->tokenizer_path() == s.tokenizer);

  s.tokenizer = "/nonexistent/tokenizer.model";
  try {
    open_model(s);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::not_found);
    CHECK_THAT(e.what(), Catch::Contains("model.tokenizer") && Catch::Contains("/nonexistent/tokenizer.model"));
  }
}

TEST_CASE("open_model builds dummy weights for a preset given as a config.json path", "[checkpoint]") {
  ModelSection s;
  s.load_format = "dummy";
  s.preset = (kStories / "config.json").string();
  s.seed = 3;
  const auto ckpt = open_model(s);
  CHECK(ckpt->config().hidden_size == 64);
  CHECK(ckpt->tensors().size() == 47);
  CHECK(fs::exists(ckpt->tokenizer_path()));  // the default llama2 tokenizer
  CHECK(ckpt->tokenizer_path().filename() == "tokenizer.model");
}

TEST_CASE("open_model with auto picks safetensors for a path and dummy for a preset", "[checkpoint]") {
  ModelSection s;
  CHECK_THROWS_WITH(resolve_load_format(s), Catch::Contains("model.path") && Catch::Contains("--preset"));
  s.preset = "llama-110m";
  CHECK(resolve_load_format(s) == "dummy");
  CHECK(resolve_model_config(s).hidden_size == 768);
  s.path = kStories.string();
  CHECK(resolve_load_format(s) == "safetensors");
  CHECK(resolve_model_config(s).hidden_size == 64);
  s.load_format = "dummy";
  s.preset = "gpt-2";
  CHECK_THROWS_WITH(resolve_model_config(s), Catch::Contains("model.preset") && Catch::Contains("'gpt-2'") &&
                                                 Catch::Contains("tinyllama-1.1b"));
}
