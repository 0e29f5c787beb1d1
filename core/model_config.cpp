#include "core/model_config.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace llmk {
namespace {

using nlohmann::json;

[[noreturn]] void fail(ErrorCode code, const std::string& source, const std::string& what) {
  throw Error(code, source + ": " + what);
}

std::string read_text_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(ErrorCode::bad_checkpoint, file.string(), "cannot be opened");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

json parse_json_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(ErrorCode::bad_checkpoint, source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(ErrorCode::bad_checkpoint, source, "not a JSON object");
  return j;
}

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// An integer in [min_value, INT32_MAX]; `fallback` when absent (nullopt: required).
int32_t get_int(const json& j, const char* key, const std::string& source, std::optional<int32_t> fallback,
                int64_t min_value = 1) {
  if (!present(j, key)) {
    if (!fallback) fail(ErrorCode::bad_checkpoint, source, std::string("missing required key '") + key + "'");
    return *fallback;
  }
  const json& v = j.at(key);
  if (!v.is_number_integer())
    fail(ErrorCode::bad_checkpoint, source, std::string(key) + "=" + v.dump() + " is not an integer");
  const int64_t value = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                            ? std::numeric_limits<int64_t>::max()
                            : v.get<int64_t>();
  if (value < min_value || value > std::numeric_limits<int32_t>::max())
    fail(ErrorCode::bad_checkpoint, source,
         std::string(key) + "=" + v.dump() + " is out of range (must be >= " + std::to_string(min_value) + ")");
  return static_cast<int32_t>(value);
}

float get_positive_float(const json& j, const char* key, const std::string& source, float fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) fail(ErrorCode::bad_checkpoint, source, std::string(key) + "=" + v.dump() + " is not a number");
  const double value = v.get<double>();
  if (!(value > 0.0) || value > 1e30)
    fail(ErrorCode::bad_checkpoint, source, std::string(key) + "=" + v.dump() + " must be a positive number");
  return static_cast<float>(value);
}

bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) fail(ErrorCode::bad_checkpoint, source, std::string(key) + "=" + v.dump() + " is not a boolean");
  return v.get<bool>();
}

// eos_token_id: an integer or a non-empty list of integers.
std::vector<int32_t> get_id_list(const json& j, const char* key, const std::string& source) {
  const json& v = j.at(key);
  std::vector<int32_t> ids;
  auto one = [&](const json& e) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail(ErrorCode::bad_checkpoint, source,
           std::string(key) + "=" + v.dump() + " must be a non-negative integer or a list of them");
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  };
  if (v.is_array()) {
    for (const json& e : v) one(e);
    if (ids.empty()) fail(ErrorCode::bad_checkpoint, source, std::string(key) + " is an empty list");
  } else {
    one(v);
  }
  return ids;
}

// bos/eos ids from config.json or generation_config.json (the latter wins).
void apply_special_ids(ModelConfig& c, const json& j, const std::string& source) {
  if (present(j, "bos_token_id")) c.bos_token_id = get_int(j, "bos_token_id", source, std::nullopt, 0);
  if (present(j, "eos_token_id")) c.eos_token_ids = get_id_list(j, "eos_token_id", source);
}

// Special tokens must be rows of the embedding table.
void check_special_ids(const ModelConfig& c, const std::string& source) {
  auto check = [&](const char* key, int32_t id) {
    if (id >= c.vocab_size)
      fail(ErrorCode::bad_checkpoint, source,
           std::string(key) + " " + std::to_string(id) + " is outside the vocabulary (vocab_size=" +
               std::to_string(c.vocab_size) + ")");
  };
  check("bos_token_id", c.bos_token_id);
  for (int32_t id : c.eos_token_ids) check("eos_token_id", id);
}

void check_architecture(ModelConfig& c, const json& j, const std::string& source) {
  static const char* const kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";
  if (present(j, "architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      fail(ErrorCode::bad_checkpoint, source, "architectures=" + a.dump() + " must be a list of one name");
    c.architecture = a[0].get<std::string>();
  } else if (present(j, "model_type") && j.at("model_type").is_string()) {
    const std::string type = j.at("model_type").get<std::string>();
    c.architecture = type == "llama"     ? "LlamaForCausalLM"
                     : type == "mistral" ? "MistralForCausalLM"
                     : type == "qwen2"   ? "Qwen2ForCausalLM"
                                         : type;
  } else {
    fail(ErrorCode::bad_checkpoint, source, "missing 'architectures' (and no 'model_type')");
  }
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM" &&
      c.architecture != "Qwen2ForCausalLM")
    fail(ErrorCode::unsupported, source,
         "architectures: '" + c.architecture + "' is not supported (supported: " + kSupported + ")");
}

// Features that would change the forward pass: refused rather than ignored.
void check_unsupported_features(const ModelConfig& c, const json& j, const std::string& source) {
  if (present(j, "hidden_act")) {
    const json& v = j.at("hidden_act");
    if (!v.is_string() || v.get<std::string>() != "silu")
      fail(ErrorCode::unsupported, source, "hidden_act=" + v.dump() + " is not supported (only \"silu\")");
  }
  // Qwen2's modelling code has fixed biases (q/k/v) and ignores these keys.
  if (c.architecture != "Qwen2ForCausalLM") {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (get_bool(j, key, source, false))
        fail(ErrorCode::unsupported, source,
             std::string(key) + "=true is not supported (" + c.architecture +
                 " would bias o_proj or the MLP too; only Qwen2's q/k/v biases are)");
    }
  }
  // GPTQ and AWQ folders are read by core/gptq_checkpoint.hpp; other methods are refused.
  if (present(j, "quantization_config")) {
    const json& q = j.at("quantization_config");
    const std::string method = q.is_object() && q.contains("quant_method") && q.at("quant_method").is_string()
                                   ? q.at("quant_method").get<std::string>()
                                   : "";
    if (method != "gptq" && method != "awq")
      fail(ErrorCode::unsupported, source,
           "quantization_config: quant_method '" + method + "' is not supported (gptq, awq)");
  }
}

// A positive number inside the rope_scaling object.
float scaling_number(const json& v, const char* key, const std::string& source) {
  if (!v.contains(key) || !v.at(key).is_number() || !(v.at(key).get<double>() > 0.0) || v.at(key).get<double>() > 1e30)
    fail(ErrorCode::bad_checkpoint, source,
         std::string("rope_scaling.") + key + " must be a positive number: " + v.dump());
  return static_cast<float>(v.at(key).get<double>());
}

// rope_scaling: null, or an object whose "rope_type" (newer) or "type"
// names the method.
RopeScaling parse_rope_scaling(const json& j, const std::string& source) {
  RopeScaling r;
  if (!present(j, "rope_scaling")) return r;
  const json& v = j.at("rope_scaling");
  if (!v.is_object()) fail(ErrorCode::bad_checkpoint, source, "rope_scaling=" + v.dump() + " is not an object");
  std::string type;
  for (const char* k : {"type", "rope_type"})  // rope_type wins when both are given
    if (v.contains(k) && v.at(k).is_string()) type = v.at(k).get<std::string>();
  if (type.empty()) fail(ErrorCode::bad_checkpoint, source, "rope_scaling has no string 'rope_type' or 'type': " + v.dump());
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScalingType::linear;
    r.factor = scaling_number(v, "factor", source);
    return r;
  }
  if (type == "llama3") {
    r.type = RopeScalingType::llama3;
    r.factor = scaling_number(v, "factor", source);
    r.low_freq_factor = scaling_number(v, "low_freq_factor", source);
    r.high_freq_factor = scaling_number(v, "high_freq_factor", source);
    r.original_max_position_embeddings =
        get_int(v, "original_max_position_embeddings", source + ": rope_scaling", std::nullopt);
    if (!(r.low_freq_factor < r.high_freq_factor))
      fail(ErrorCode::bad_checkpoint, source, "rope_scaling: low_freq_factor must be below high_freq_factor: " + v.dump());
    return r;
  }
  fail(ErrorCode::unsupported, source,
       "rope_scaling of type '" + type + "' is not supported (default, linear, llama3): " + v.dump());
}

// Mistral's sliding_window (Qwen2's only with use_sliding_window).
std::optional<int32_t> parse_sliding_window(const ModelConfig& c, const json& j, const std::string& source) {
  if (c.architecture == "Qwen2ForCausalLM") {
    if (get_bool(j, "use_sliding_window", source, false))
      fail(ErrorCode::unsupported, source,
           "use_sliding_window=true is not supported (Qwen2 windows some layers only, per max_window_layers)");
    return std::nullopt;
  }
  if (!present(j, "sliding_window")) return std::nullopt;
  return get_int(j, "sliding_window", source, std::nullopt);
}

}  // namespace

ModelConfig parse_model_config_json(const std::string& text, const std::string& source) {
  const json j = parse_json_object(text, source);
  ModelConfig c;
  check_architecture(c, j, source);
  check_unsupported_features(c, j, source);
  c.attention_bias = c.architecture == "Qwen2ForCausalLM";
  c.rope_scaling = parse_rope_scaling(j, source);

  c.hidden_size = get_int(j, "hidden_size", source, std::nullopt);
  c.intermediate_size = get_int(j, "intermediate_size", source, std::nullopt);
  c.num_layers = get_int(j, "num_hidden_layers", source, std::nullopt);
  c.num_heads = get_int(j, "num_attention_heads", source, std::nullopt);
  c.num_kv_heads = get_int(j, "num_key_value_heads", source, c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(ErrorCode::bad_checkpoint, source,
         "num_key_value_heads=" + std::to_string(c.num_kv_heads) +
             " does not divide num_attention_heads=" + std::to_string(c.num_heads));
  if (present(j, "head_dim")) {
    c.head_dim = get_int(j, "head_dim", source, std::nullopt);
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail(ErrorCode::bad_checkpoint, source,
           "num_attention_heads=" + std::to_string(c.num_heads) +
               " does not divide hidden_size=" + std::to_string(c.hidden_size) + " (and no head_dim is given)");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0)
    fail(ErrorCode::bad_checkpoint, source, "head_dim=" + std::to_string(c.head_dim) + " must be even (rotary pairs)");
  c.vocab_size = get_int(j, "vocab_size", source, std::nullopt);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", source, 2048);
  c.rms_norm_eps = get_positive_float(j, "rms_norm_eps", source, 1e-6f);  // transformers' default
  c.rope_theta = get_positive_float(j, "rope_theta", source, 10000.0f);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);

  // "dtype" is the newer spelling of "torch_dtype"; absent means float32.
  const char* dtype_key = present(j, "torch_dtype") ? "torch_dtype" : present(j, "dtype") ? "dtype" : nullptr;
  c.dtype = DType::f32;
  if (dtype_key) {
    const json& v = j.at(dtype_key);
    DType d;
    if (!v.is_string() || !parse_dtype(v.get<std::string>(), d) ||
        (d != DType::f32 && d != DType::f16 && d != DType::bf16))
      fail(ErrorCode::unsupported, source,
           std::string(dtype_key) + "=" + v.dump() + " is not supported (float32, float16, bfloat16)");
    c.dtype = d;
  }
  apply_special_ids(c, j, source);
  check_special_ids(c, source);

  // A window at least the context changes nothing; it is kept as given.
  c.sliding_window = parse_sliding_window(c, j, source);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(model_dir))
    throw Error(ErrorCode::bad_checkpoint, model_dir.string() +
                                               ": a file that is neither GGUF (no 'GGUF' magic) nor a model directory");
  if (!fs::is_directory(model_dir))
    throw Error(ErrorCode::not_found, model_dir.string() + ": model directory does not exist");
  const fs::path config_file = model_dir / "config.json";
  if (!fs::exists(config_file)) fail(ErrorCode::bad_checkpoint, config_file.string(), "not found");
  ModelConfig c = parse_model_config_json(read_text_file(config_file), config_file.string());
  apply_folder_configs(c, model_dir);
  return c;
}

void apply_folder_configs(ModelConfig& c, const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  const fs::path generation_file = model_dir / "generation_config.json";
  if (fs::exists(generation_file)) {
    const json j = parse_json_object(read_text_file(generation_file), generation_file.string());
    apply_special_ids(c, j, generation_file.string());
    check_special_ids(c, generation_file.string());
  }
  const fs::path tokenizer_file = model_dir / "tokenizer_config.json";
  if (fs::exists(tokenizer_file)) {
    const json j = parse_json_object(read_text_file(tokenizer_file), tokenizer_file.string());
    c.add_bos_token = get_bool(j, "add_bos_token", tokenizer_file.string(), c.add_bos_token);
  }
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = int64_t(num_heads) * head_dim, kv = int64_t(num_kv_heads) * head_dim;
  const int64_t per_layer = h * q + 2 * h * kv + q * h      // q, k, v, o
                            + (attention_bias ? q + 2 * kv : 0)  // q, k, v biases
                            + 3 * h * intermediate_size      // gate, up, down
                            + 2 * h;                         // the two norms
  const int64_t embeddings = int64_t(vocab_size) * h * (tie_word_embeddings ? 1 : 2);
  return embeddings + num_layers * per_layer + h;
}

int64_t ModelConfig::kv_bytes_per_token(DType kv_dtype, int32_t group_size) const {
  const int64_t elements = 2 * int64_t(num_layers) * num_kv_heads * head_dim;
  int64_t bytes = elements * static_cast<int64_t>(dtype_size(kv_dtype));
  if (kv_dtype == DType::i8) {
    if (group_size <= 0) throw Error(ErrorCode::invalid_argument, "kv_bytes_per_token: group_size must be >= 1");
    const int64_t groups_per_head = (head_dim + group_size - 1) / group_size;
    bytes += 2 * int64_t(num_layers) * num_kv_heads * groups_per_head * 4;
  }
  return bytes;
}

namespace {

ModelConfig make_preset(int32_t hidden, int32_t layers, int32_t heads, int32_t kv_heads, int32_t intermediate,
                        int32_t vocab, DType dtype, int32_t max_positions, bool tied) {
  ModelConfig c;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.dtype = dtype;
  c.max_position_embeddings = max_positions;
  c.tie_word_embeddings = tied;
  c.rms_norm_eps = 1e-5f;
  return c;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  return {"llama-110m", "tinyllama-1.1b", "llama2-7b", "llama3-8b", "llama3.2-1b", "qwen2.5-0.5b", "mistral-7b"};
}

std::optional<ModelConfig> model_preset(const std::string& name) {
  if (name == "llama-110m") return make_preset(768, 12, 12, 12, 2048, 32000, DType::f32, 1024, true);
  if (name == "tinyllama-1.1b") return make_preset(2048, 22, 32, 4, 5632, 32000, DType::f16, 2048, false);
  if (name == "llama2-7b") return make_preset(4096, 32, 32, 32, 11008, 32000, DType::bf16, 4096, false);
  if (name == "llama3-8b") {
    ModelConfig c = make_preset(4096, 32, 32, 8, 14336, 128256, DType::bf16, 8192, false);
    c.rope_theta = 500000.0f;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128009};  // <|end_of_text|>, <|eot_id|>
    return c;
  }
  // The three below follow the published config.json files (head_dim is
  // hidden / heads for each); their contexts (131072, 32768, 32768 there)
  // are capped at 8192 so that a default KV cache and the rotary tables stay
  // small. Llama 3.2's rope scaling and Mistral's 4096-token window still
  // act within that context.
  if (name == "llama3.2-1b") {
    ModelConfig c = make_preset(2048, 16, 32, 8, 8192, 128256, DType::bf16, 8192, true);
    c.rope_theta = 500000.0f;
    c.rope_scaling.type = RopeScalingType::llama3;
    c.rope_scaling.factor = 32.0f;
    c.rope_scaling.low_freq_factor = 1.0f;
    c.rope_scaling.high_freq_factor = 4.0f;
    c.rope_scaling.original_max_position_embeddings = 8192;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};  // <|end_of_text|>, <|eom_id|>, <|eot_id|>
    return c;
  }
  if (name == "qwen2.5-0.5b") {
    ModelConfig c = make_preset(896, 24, 14, 2, 4864, 151936, DType::bf16, 8192, true);
    c.architecture = "Qwen2ForCausalLM";
    c.attention_bias = true;
    c.rope_theta = 1000000.0f;
    c.rms_norm_eps = 1e-6f;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>
    c.add_bos_token = false;
    return c;
  }
  if (name == "mistral-7b") {
    ModelConfig c = make_preset(4096, 32, 32, 8, 14336, 32000, DType::bf16, 8192, false);
    c.architecture = "MistralForCausalLM";
    c.sliding_window = 4096;
    return c;
  }
  namespace fs = std::filesystem;
  if (!name.empty() && fs::is_directory(name)) return load_model_config(name);
  if (!name.empty() && fs::is_regular_file(name)) return parse_model_config_json(read_text_file(name), name);
  return std::nullopt;
}

}  // namespace llmk
