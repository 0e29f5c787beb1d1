#include "core/gguf_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "core/gguf_metadata.hpp"
#include "core/gguf_tokenizer.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;
using namespace gguf_meta;

[[noreturn]] void fail_tensor(const GgufFile& f, const std::string& name, const std::string& what,
                              ErrorCode code = ErrorCode::bad_checkpoint) {
  throw Error(code, f.name() + ": tensor '" + name + "': " + what);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The engine's dtype for a stored type: the float types as themselves,
// quantized blocks as ggml blocks (core/dtype.hpp), kept as stored.
DType stored_dtype(GgmlType t) {
  if (t == GgmlType::f32) return DType::f32;
  if (t == GgmlType::f16) return DType::f16;
  if (t == GgmlType::bf16) return DType::bf16;
  return ggml_dtype(static_cast<uint32_t>(t));
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// The tensors of a GgufFile under the engine's names, each in its stored
// type (quantized ones as ggml blocks: the linear plugins decide whether to
// compute on them or have them dequantized, core/model_weights.cpp).
// Permuted or misaligned tensors live in owned_, the rest point into the
// mapping.
class GgufCheckpoint final : public Checkpoint {
 public:
  explicit GgufCheckpoint(std::unique_ptr<GgufFile> file);

 private:
  struct Mapped {
    const GgufTensorInfo* info;
    std::vector<int64_t> shape;  // row-major
  };
  void adopt(const std::string& hf_name, const Mapped& m, int64_t permute_heads);

  std::unique_ptr<GgufFile> file_;
  std::vector<std::unique_ptr<void, FreeDeleter>> owned_;  // 64-byte aligned converted tensors
};

GgufCheckpoint::GgufCheckpoint(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {
  const GgufFile& f = *file_;
  config_ = gguf_model_config(f);
  source_ = f.name();
  format_ = "gguf";
  const bool is_llama = config_.architecture == "LlamaForCausalLM";
  // Nine tensors per layer plus the embedding and final norm (q/k/v biases
  // when the config has them are listed as expected tensors): a block_count
  // the file cannot hold is refused before listing what it should hold.
  const uint64_t min_tensors = 9 * uint64_t(config_.num_layers) + 2;
  if (f.tensors().size() < min_tensors)
    throw Error(ErrorCode::bad_checkpoint, f.name() + ": metadata says " + std::to_string(config_.num_layers) +
                                               " layers, which need at least " + std::to_string(min_tensors) +
                                               " tensors, but the file holds " + std::to_string(f.tensors().size()));
  const auto expected = expected_tensors(config_);

  std::map<std::string, Mapped> found;  // engine name -> GGUF tensor
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // read into the config's rope scaling
    const std::string hf = gguf_to_hf_tensor_name(t.name);
    auto want = expected.find(hf);
    if (hf.empty() || want == expected.end())
      fail_tensor(f, t.name,
                  "unexpected tensor (a " + config_.architecture + " with " + std::to_string(config_.num_layers) +
                      " layers has no such weight)");
    const std::vector<int64_t> shape = t.shape();
    if (shape != want->second)
      fail_tensor(f, t.name, "shape " + shape_string(shape) + " does not match the metadata's " +
                                 shape_string(want->second));
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t.type));
    if (!info->can_dequantize)
      fail_tensor(f, t.name,
                  std::string("type ") + info->name + " is not supported (" + ggml_dequantizable_type_names() + ")",
                  ErrorCode::unsupported);
    found.emplace(hf, Mapped{&t, shape});
  }
  for (const auto& [name, shape] : expected) {
    if (found.count(name)) continue;
    size_t num_missing = 0;
    for (const auto& [n, s] : expected) num_missing += found.count(n) ? 0 : 1;
    fail_tensor(f, name,
                "missing" + (num_missing > 1 ? " (and " + std::to_string(num_missing - 1) + " more tensors)"
                                             : std::string()));
  }

  for (const auto& [name, m] : found) {
    int64_t permute_heads = 0;
    const std::string prefix = name.rfind("model.layers.", 0) == 0 ? name.substr(0, name.find('.', 13) + 1) : "";
    if (is_llama && !prefix.empty() && name == prefix + "self_attn.q_proj.weight") permute_heads = config_.num_heads;
    if (is_llama && !prefix.empty() && name == prefix + "self_attn.k_proj.weight") permute_heads = config_.num_kv_heads;
    adopt(name, m, permute_heads);
  }
  config_.dtype = tensors_.at("model.layers.0.self_attn.q_proj.weight").dtype;
  if (!gguf_tokenizer_model(f).empty()) tokenizer_path_ = f.name();
}

void GgufCheckpoint::adopt(const std::string& hf_name, const Mapped& m, int64_t permute_heads) {
  TensorView view;
  view.name = hf_name;
  view.dtype = stored_dtype(m.info->type);
  view.shape = m.shape;
  const uint8_t* src = file_->tensor_data(*m.info);
  // Blocks are read at any alignment; plain elements need their own.
  const size_t align = is_ggml_dtype(view.dtype) ? 1 : dtype_size(view.dtype);
  if (permute_heads == 0 && reinterpret_cast<uintptr_t>(src) % align == 0) {
    view.data = src;
  } else {
    const size_t bytes = view.nbytes();
    void* buffer = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (buffer == nullptr) throw Error(ErrorCode::internal, file_->name() + ": cannot allocate " + std::to_string(bytes) + " bytes for '" + m.info->name + "'");
    owned_.emplace_back(buffer);
    if (permute_heads > 0) {
      // Rows move whole (a quantized row is a whole number of blocks).
      const int64_t rows = m.shape[0];
      unpermute_rotary_rows(src, static_cast<uint8_t*>(buffer), permute_heads, rows / permute_heads,
                            bytes / static_cast<size_t>(rows));
    } else {
      std::memcpy(buffer, src, bytes);
    }
    view.data = buffer;
  }
  tensors_.emplace(hf_name, std::move(view));
}

}  // namespace

std::string gguf_to_hf_tensor_name(const std::string& name) {
  static const std::map<std::string, std::string> kGlobal = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                             {"output_norm.weight", "model.norm.weight"},
                                                             {"output.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},       {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},         {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},         {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},             {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},             {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},              {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (auto it = kGlobal.find(name); it != kGlobal.end()) return it->second;
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 9) return "";
  const std::string layer = name.substr(4, dot - 4);
  for (char c : layer)
    if (c < '0' || c > '9') return "";
  if (layer.size() > 1 && layer[0] == '0') return "";
  auto it = kLayer.find(name.substr(dot + 1));
  if (it == kLayer.end()) return "";
  return "model.layers." + layer + "." + it->second;
}

void unpermute_rotary_rows(const uint8_t* src, uint8_t* dst, int64_t num_heads, int64_t head_dim, size_t row_bytes) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t s = 0; s < 2; ++s)
        std::memcpy(dst + static_cast<size_t>(h * head_dim + s * half + i) * row_bytes,
                    src + static_cast<size_t>(h * head_dim + 2 * i + s) * row_bytes, row_bytes);
}

namespace {

// Rope scaling in GGUF, as llama.cpp's writer records it:
//   - {arch}.rope.scaling.type "linear" with {arch}.rope.scaling.factor
//     (positions divided by factor); "none" or absent: no scaling;
//   - llama3 scaling as the rope_freqs.weight tensor (F32 or F16,
//     [head_dim / 2]): per-frequency divisors, which llama.cpp's converter
//     computes from config.json's rope_scaling. They are applied exactly
//     (RopeScaling::freq_factors), so any per-frequency scheme stored that
//     way is served, on top of a linear factor if both are present.
// Other types (yarn, longrope) are refused with Error(unsupported).
RopeScaling gguf_rope_scaling(const GgufFile& f, const std::string& a, int32_t head_dim) {
  RopeScaling r;
  const auto type = get_string(f, a + "rope.scaling.type");
  if (type && *type == "linear") {
    r.type = RopeScalingType::linear;
    const double factor = get_number(f, a + "rope.scaling.factor", std::nullopt);
    if (!(factor > 0 && factor < 1e30)) fail_key(f, a + "rope.scaling.factor", "must be a positive number");
    r.factor = static_cast<float>(factor);
  } else if (type && *type != "none") {
    throw Error(ErrorCode::unsupported,
                f.name() + ": " + a + "rope.scaling.type '" + *type + "' is not supported (none, linear)");
  } else if (f.find(a + "rope.scaling.factor") && get_number(f, a + "rope.scaling.factor", std::nullopt) != 1.0 &&
             !type) {
    throw Error(ErrorCode::unsupported, f.name() + ": " + a + "rope.scaling.factor without a scaling type");
  }
  if (const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    const std::vector<int64_t> shape = t->shape();
    if (shape != std::vector<int64_t>{head_dim / 2})
      fail_tensor(f, t->name, "shape " + shape_string(shape) + " is not [head_dim / 2] = [" +
                                  std::to_string(head_dim / 2) + "]");
    if (t->type != GgmlType::f32 && t->type != GgmlType::f16)
      fail_tensor(f, t->name, "rope frequency factors must be F32 or F16", ErrorCode::unsupported);
    r.freq_factors.resize(static_cast<size_t>(head_dim / 2));
    dequantize_ggml(t->type, f.tensor_data(*t), r.freq_factors.data(), head_dim / 2);
    for (float x : r.freq_factors)
      if (!(x > 0.0f) || !std::isfinite(x))
        fail_tensor(f, t->name, "holds " + std::to_string(x) + " (frequency factors must be positive and finite)");
  }
  return r;
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const auto arch = get_string(f, "general.architecture");
  if (!arch) fail_key(f, "general.architecture", "is missing (required)");
  if (*arch != "llama" && *arch != "qwen2")
    throw Error(ErrorCode::unsupported,
                f.name() + ": general.architecture '" + *arch + "' is not supported (llama, qwen2)");
  const std::string a = *arch + ".";
  ModelConfig c;
  c.architecture = *arch == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM";
  c.hidden_size = get_int(f, a + "embedding_length", std::nullopt);
  c.num_layers = get_int(f, a + "block_count", std::nullopt);
  c.intermediate_size = get_int(f, a + "feed_forward_length", std::nullopt);
  c.num_heads = get_int(f, a + "attention.head_count", std::nullopt);
  c.num_kv_heads = get_int(f, a + "attention.head_count_kv", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    fail_key(f, a + "attention.head_count_kv",
             "= " + std::to_string(c.num_kv_heads) + " does not divide attention.head_count = " +
                 std::to_string(c.num_heads));
  if (f.find(a + "attention.key_length")) {
    c.head_dim = get_int(f, a + "attention.key_length", std::nullopt);
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail_key(f, a + "attention.head_count",
               "= " + std::to_string(c.num_heads) + " does not divide embedding_length = " +
                   std::to_string(c.hidden_size) + " (and no attention.key_length is given)");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) fail_key(f, a + "attention.key_length", "gives an odd head size " + std::to_string(c.head_dim));
  if (f.find(a + "attention.value_length") && get_int(f, a + "attention.value_length", std::nullopt) != c.head_dim)
    throw Error(ErrorCode::unsupported, f.name() + ": " + a + "attention.value_length differs from the key length");
  if (f.find(a + "rope.dimension_count") && get_int(f, a + "rope.dimension_count", std::nullopt) != c.head_dim)
    throw Error(ErrorCode::unsupported, f.name() + ": " + a + "rope.dimension_count = " +
                                            std::to_string(get_int(f, a + "rope.dimension_count", std::nullopt)) +
                                            " differs from the head size " + std::to_string(c.head_dim) +
                                            " (partial rotary embeddings are not supported)");
  c.max_position_embeddings = get_int(f, a + "context_length", std::nullopt);
  const double eps = get_number(f, a + "attention.layer_norm_rms_epsilon", std::nullopt);
  if (!(eps > 0 && eps < 1)) fail_key(f, a + "attention.layer_norm_rms_epsilon", "must be in (0, 1)");
  c.rms_norm_eps = static_cast<float>(eps);
  const double theta = get_number(f, a + "rope.freq_base", 10000.0);
  if (!(theta > 0 && theta < 1e30)) fail_key(f, a + "rope.freq_base", "must be a positive number");
  c.rope_theta = static_cast<float>(theta);
  c.rope_scaling = gguf_rope_scaling(f, a, c.head_dim);
  // llama.cpp's writer has a sliding-window key ({arch}.attention.sliding_window);
  // its Mistral conversion omits it, so such files attend to the whole context.
  if (f.find(a + "attention.sliding_window")) c.sliding_window = get_int(f, a + "attention.sliding_window", std::nullopt);
  // Qwen2's q/k/v biases: present on every layer or on none (a missing one is
  // then reported as a missing tensor); llama files have none.
  c.attention_bias = *arch == "qwen2" && f.find_tensor("blk.0.attn_q.bias") != nullptr;

  // Vocabulary: the explicit key, else the token list, else the embedding's rows.
  const auto tokens = get_string_array(f, "tokenizer.ggml.tokens");
  if (f.find(a + "vocab_size")) {
    c.vocab_size = get_int(f, a + "vocab_size", std::nullopt);
  } else if (tokens) {
    if (tokens->empty() || tokens->size() > size_t(INT32_MAX)) fail_key(f, "tokenizer.ggml.tokens", "has no usable length");
    c.vocab_size = static_cast<int32_t>(tokens->size());
  } else if (const GgufTensorInfo* e = f.find_tensor("token_embd.weight"); e && e->dims.size() == 2 &&
                                                                           e->dims[1] > 0 && e->dims[1] <= INT32_MAX) {
    c.vocab_size = static_cast<int32_t>(e->dims[1]);
  } else {
    fail_key(f, a + "vocab_size", "is missing, and neither tokenizer.ggml.tokens nor token_embd.weight gives it");
  }
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;

  const bool spm = gguf_tokenizer_model(f) == "llama";
  c.add_bos_token = get_bool(f, "tokenizer.ggml.add_bos_token", spm);
  if (f.find("tokenizer.ggml.bos_token_id")) c.bos_token_id = get_int(f, "tokenizer.ggml.bos_token_id", std::nullopt, 0);
  if (f.find("tokenizer.ggml.eos_token_id"))
    c.eos_token_ids = {get_int(f, "tokenizer.ggml.eos_token_id", std::nullopt, 0)};
  if (c.bos_token_id >= c.vocab_size)
    fail_key(f, "tokenizer.ggml.bos_token_id", "= " + std::to_string(c.bos_token_id) + " is outside the vocabulary");
  for (int32_t id : c.eos_token_ids)
    if (id >= c.vocab_size)
      fail_key(f, "tokenizer.ggml.eos_token_id", "= " + std::to_string(id) + " is outside the vocabulary");
  return c;
}

ModelConfig load_gguf_model_config(const fs::path& file) { return gguf_model_config(GgufFile(file)); }

std::unique_ptr<Checkpoint> load_gguf_checkpoint(const fs::path& file) {
  return load_gguf_checkpoint(std::make_unique<GgufFile>(file));
}

std::unique_ptr<Checkpoint> load_gguf_checkpoint(std::unique_ptr<GgufFile> file) {
  return std::make_unique<GgufCheckpoint>(std::move(file));
}

}  // namespace llmk
