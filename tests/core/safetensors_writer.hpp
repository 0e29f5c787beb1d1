// Test helper: writes Hugging Face model directories (config.json +
// safetensors, single or sharded), valid or deliberately broken, into a
// temporary directory. Header-only; include as "core/safetensors_writer.hpp".
//
//   TempDir dir;
//   ModelConfig cfg = tiny_llama_config();
//   write_model_dir(dir.path(), cfg, /*seed=*/1);                  // valid
//   auto tensors = llama_tensors(cfg, 1);                           // or build your own
//   tensors.pop_back();
//   write_safetensors(dir.path() / "model.safetensors", tensors);   // broken
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/dtype.hpp"
#include "core/model_config.hpp"

namespace llmk::test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/llmk_test_XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

inline std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// One tensor to write: dtype is the safetensors spelling ("F32", "F16",
// "BF16", or anything else to test refusals); data is the raw bytes.
struct TensorSpec {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::string data;
};

inline size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16") return 2;
  if (dtype == "F64" || dtype == "I64") return 8;
  return 1;
}

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The header object and the data buffer for tensors laid out back to back
// in the given order. Tests may edit the header before serializing.
inline nlohmann::json safetensors_header(const std::vector<TensorSpec>& tensors, std::string& data) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  data.clear();
  for (const auto& t : tensors) {
    const uint64_t begin = data.size();
    data += t.data;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, uint64_t(data.size())}}};
  }
  return header;
}

// The file's bytes: u64 length, header text (space-padded to a multiple of
// 8 as the reference writer does), data. header_len_override replaces the
// length field only.
inline std::string safetensors_bytes(const std::string& header_text, const std::string& data,
                                     std::optional<uint64_t> header_len_override = std::nullopt) {
  std::string text = header_text;
  while ((8 + text.size()) % 8 != 0) text += ' ';
  const uint64_t len = header_len_override.value_or(text.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + text + data;
}

inline void write_safetensors(const std::filesystem::path& file, const std::vector<TensorSpec>& tensors) {
  std::string data;
  const nlohmann::json header = safetensors_header(tensors, data);
  write_file(file, safetensors_bytes(header.dump(), data));
}

// Deterministic values in [-0.5, 0.5) stored in `dtype` (F32, F16 or BF16).
inline std::string random_tensor_bytes(const std::string& dtype, int64_t numel, uint64_t seed) {
  std::string out;
  out.reserve(static_cast<size_t>(numel) * safetensors_dtype_size(dtype));
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  for (int64_t i = 0; i < numel; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;  // LCG
    const float v = static_cast<float>(state >> 40) / 16777216.0f - 0.5f;
    if (dtype == "F32") {
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t h = dtype == "BF16" ? f32_to_bf16(v) : f32_to_f16(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

inline std::string safetensors_dtype_name(DType d) {
  return d == DType::f16 ? "F16" : d == DType::bf16 ? "BF16" : "F32";
}

// Every tensor a config requires (expected_tensors), with random values.
inline std::vector<TensorSpec> llama_tensors(const ModelConfig& cfg, uint64_t seed) {
  std::vector<TensorSpec> out;
  uint64_t i = 0;
  for (const auto& [name, shape] : expected_tensors(cfg)) {
    const std::string dtype = safetensors_dtype_name(cfg.dtype);
    out.push_back({name, dtype, shape, random_tensor_bytes(dtype, numel_of(shape), seed * 1000 + i++)});
  }
  return out;
}

// A small GQA Llama: hidden 16, 2 layers, 4 heads, 2 KV heads, untied.
inline ModelConfig tiny_llama_config() {
  ModelConfig c;
  c.hidden_size = 16;
  c.intermediate_size = 40;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 64;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = false;
  c.dtype = DType::f32;
  return c;
}

// config.json for a ModelConfig, as transformers writes it. Tests edit the
// object to break it.
inline nlohmann::json config_json(const ModelConfig& c) {
  nlohmann::json j = {
      {"architectures", {c.architecture}},
      {"model_type", c.architecture == "MistralForCausalLM" ? "mistral" : "llama"},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.dtype == DType::f16 ? "float16" : c.dtype == DType::bf16 ? "bfloat16" : "float32"},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                                                   : nlohmann::json(c.eos_token_ids)},
      {"attention_bias", false},
      {"rope_scaling", nullptr},
  };
  if (c.sliding_window) j["sliding_window"] = *c.sliding_window;
  return j;
}

inline void write_config_json(const std::filesystem::path& dir, const nlohmann::json& config) {
  write_file(dir / "config.json", config.dump(2));
}

// A complete, valid model directory: config.json + model.safetensors.
inline std::vector<TensorSpec> write_model_dir(const std::filesystem::path& dir, const ModelConfig& cfg,
                                               uint64_t seed) {
  write_config_json(dir, config_json(cfg));
  auto tensors = llama_tensors(cfg, seed);
  write_safetensors(dir / "model.safetensors", tensors);
  return tensors;
}

// The same, split round-robin over num_shards files with an index
// (model-0000i-of-0000n.safetensors + model.safetensors.index.json).
inline std::vector<TensorSpec> write_sharded_model_dir(const std::filesystem::path& dir, const ModelConfig& cfg,
                                                       uint64_t seed, int num_shards) {
  write_config_json(dir, config_json(cfg));
  auto tensors = llama_tensors(cfg, seed);
  std::vector<std::vector<TensorSpec>> shards(num_shards);
  nlohmann::json weight_map = nlohmann::json::object();
  auto shard_name = [&](int i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", i + 1, num_shards);
    return std::string(buf);
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    shards[i % num_shards].push_back(tensors[i]);
    weight_map[tensors[i].name] = shard_name(static_cast<int>(i % num_shards));
  }
  for (int i = 0; i < num_shards; ++i) write_safetensors(dir / shard_name(i), shards[i]);
  write_file(dir / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
  return tensors;
}

}  // namespace llmk::test
