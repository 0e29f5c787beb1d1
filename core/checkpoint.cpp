#include "core/checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/bnb_checkpoint.hpp"
#include "core/compressed_tensors_checkpoint.hpp"
#include "core/error.hpp"
#include "core/gptq_checkpoint.hpp"
#include "core/safetensors.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail_tensor(const fs::path& file, const std::string& name, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": tensor '" + name + "': " + what);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_ignored_rotary(const std::string& name) {
  static const std::string suffix = ".self_attn.rotary_emb.inv_freq";
  return name.rfind("model.layers.", 0) == 0 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Safetensors files kept mapped for the checkpoint's lifetime.
class SafetensorsCheckpoint final : public Checkpoint {
 public:
  explicit SafetensorsCheckpoint(const fs::path& model_dir);

 private:
  struct Found {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  void open_single(const fs::path& file, std::map<std::string, Found>& found);
  void open_sharded(const fs::path& index_file, std::map<std::string, Found>& found);
  void check_and_adopt(const std::map<std::string, Found>& found, const fs::path& where);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::unique_ptr<uint8_t[]>> realigned_;  // copies of misaligned tensors
};

SafetensorsCheckpoint::SafetensorsCheckpoint(const fs::path& model_dir) {
  config_ = load_model_config(model_dir);
  source_ = model_dir.string();
  std::map<std::string, Found> found;
  const fs::path single = model_dir / "model.safetensors";
  const fs::path index = model_dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    open_sharded(index, found);
    check_and_adopt(found, index);
  } else if (fs::exists(single)) {
    open_single(single, found);
    check_and_adopt(found, single);
  } else {
    throw Error(ErrorCode::bad_checkpoint,
                model_dir.string() +
                    ": no model.safetensors or model.safetensors.index.json (only safetensors weights are supported)");
  }
  tokenizer_path_ = find_tokenizer(model_dir);
}

void SafetensorsCheckpoint::open_single(const fs::path& file, std::map<std::string, Found>& found) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  for (const auto& [name, e] : files_.back()->entries()) found[name] = {files_.back().get(), &e};
}

void SafetensorsCheckpoint::open_sharded(const fs::path& index_file, std::map<std::string, Found>& found) {
  std::ifstream in(index_file);
  std::ostringstream text;
  text << in.rdbuf();
  json index;
  try {
    index = json::parse(text.str());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    throw Error(ErrorCode::bad_checkpoint, index_file.string() + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
    throw Error(ErrorCode::bad_checkpoint, index_file.string() + ": missing the 'weight_map' object");

  std::map<std::string, const SafetensorsFile*> shards;  // shard file name -> opened file
  for (const auto& [name, shard_json] : index.at("weight_map").items()) {
    if (!shard_json.is_string()) fail_tensor(index_file, name, "weight_map value is not a file name");
    const std::string shard = shard_json.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail_tensor(index_file, name, "shard '" + shard + "' is not a plain file name in the model directory");
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const fs::path shard_path = index_file.parent_path() / shard;
      if (!fs::exists(shard_path)) fail_tensor(index_file, name, "shard '" + shard + "' not found");
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
      it = shards.emplace(shard, files_.back().get()).first;
    }
    const auto& entries = it->second->entries();
    auto e = entries.find(name);
    if (e == entries.end()) fail_tensor(index_file, name, "listed in weight_map but absent from shard '" + shard + "'");
    found[name] = {it->second, &e->second};
  }
  // Every tensor of every shard must be the one the index points to.
  for (const auto& file : files_) {
    for (const auto& [name, e] : file->entries()) {
      auto f = found.find(name);
      if (f == found.end()) fail_tensor(file->path(), name, "not listed in " + index_file.filename().string());
      if (f->second.file != file.get())
        fail_tensor(file->path(), name, "also stored in " + f->second.file->path().filename().string());
    }
  }
}

void SafetensorsCheckpoint::check_and_adopt(const std::map<std::string, Found>& found, const fs::path& where) {
  const auto expected = expected_tensors(config_);
  const std::vector<int64_t> head_shape = {config_.vocab_size, config_.hidden_size};
  for (const auto& [name, f] : found) {
    const fs::path& file = f.file->path();
    if (is_ignored_rotary(name)) continue;
    const bool tied_head = name == "lm_head.weight" && config_.tie_word_embeddings;
    const std::vector<int64_t>* want = &head_shape;
    if (!tied_head) {
      auto it = expected.find(name);
      if (it == expected.end())
        fail_tensor(file, name,
                    "unexpected tensor (a " + config_.architecture + " with " + std::to_string(config_.num_layers) +
                        " layers has no such weight)");
      want = &it->second;
    }
    if (f.entry->shape != *want)
      fail_tensor(file, name, "shape " + shape_string(f.entry->shape) + " does not match the config's " +
                                  shape_string(*want));
    if (tied_head) continue;

    TensorView view;
    view.name = name;
    view.dtype = f.entry->dtype;
    view.shape = f.entry->shape;
    view.data = f.file->data(*f.entry);
    if (reinterpret_cast<uintptr_t>(view.data) % dtype_size(view.dtype) != 0) {
      realigned_.push_back(std::make_unique<uint8_t[]>(view.nbytes()));
      std::memcpy(realigned_.back().get(), view.data, view.nbytes());
      view.data = realigned_.back().get();
    }
    tensors_.emplace(name, std::move(view));
  }
  for (const auto& [name, shape] : expected) {
    if (!tensors_.count(name)) {
      size_t num_missing = 0;
      for (const auto& [n, s] : expected) num_missing += tensors_.count(n) ? 0 : 1;
      fail_tensor(where, name,
                  "missing" + (num_missing > 1 ? " (and " + std::to_string(num_missing - 1) + " more tensors)"
                                               : std::string()));
    }
  }
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorView& Checkpoint::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error(ErrorCode::bad_checkpoint, (source_.empty() ? std::string("checkpoint") : source_) + ": tensor '" +
                                               name + "': not in the checkpoint");
  return it->second;
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, t] : tensors_) total += t.nbytes();
  return total;
}

std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim,
                inter = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> t;
  t["model.embed_tokens.weight"] = {c.vocab_size, h};
  for (int32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t[p + "input_layernorm.weight"] = {h};
    t[p + "self_attn.q_proj.weight"] = {q, h};  // [out, in]
    t[p + "self_attn.k_proj.weight"] = {kv, h};
    t[p + "self_attn.v_proj.weight"] = {kv, h};
    if (c.attention_bias) {
      t[p + "self_attn.q_proj.bias"] = {q};
      t[p + "self_attn.k_proj.bias"] = {kv};
      t[p + "self_attn.v_proj.bias"] = {kv};
    }
    t[p + "self_attn.o_proj.weight"] = {h, q};
    t[p + "post_attention_layernorm.weight"] = {h};
    t[p + "mlp.gate_proj.weight"] = {inter, h};
    t[p + "mlp.up_proj.weight"] = {inter, h};
    t[p + "mlp.down_proj.weight"] = {h, inter};
  }
  t["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) t["lm_head.weight"] = {c.vocab_size, h};
  return t;
}

fs::path find_tokenizer(const fs::path& model_dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    if (fs::is_regular_file(model_dir / name)) return model_dir / name;
  }
  return {};
}

std::unique_ptr<Checkpoint> load_checkpoint(const fs::path& model_dir) {
  if (is_bnb_4bit_checkpoint(model_dir)) return load_bnb_checkpoint(model_dir);
  if (is_compressed_tensors_checkpoint(model_dir)) return load_compressed_tensors_checkpoint(model_dir);
  if (const auto quantized = read_quantized_format(model_dir)) return load_quantized_checkpoint(model_dir, *quantized);
  return std::make_unique<SafetensorsCheckpoint>(model_dir);
}

}  // namespace llmk
