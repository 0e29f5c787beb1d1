// A Llama-family model's shape, read from a Hugging Face config.json (plus
// generation_config.json and tokenizer_config.json), from GGUF metadata
// (core/gguf_checkpoint.hpp) or from a named preset. Llama (with llama3 or
// linear rope scaling), Mistral (sliding-window attention) and Qwen2 (q/k/v
// projection biases) share this one shape.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace llmk {

// How rotary frequencies are stretched for contexts beyond training
// (config.json's rope_scaling). The frequencies themselves come from
// rope_inv_freq() (core/rope_scaling.hpp).
enum class RopeScalingType {
  none,
  linear,  // inv_freq / factor (positions divided by factor)
  llama3,  // Llama 3.1+: low frequencies / factor, high ones kept, a smooth blend between
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.0f;                 // linear, llama3
  float low_freq_factor = 1.0f;        // llama3
  float high_freq_factor = 4.0f;       // llama3
  int32_t original_max_position_embeddings = 8192;  // llama3
  // GGUF's rope_freqs tensor (how llama.cpp stores llama3 scaling): the
  // frequency i is divided by freq_factors[i]; [head_dim / 2] or empty.
  std::vector<float> freq_factors;

  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";  // or MistralForCausalLM, Qwen2ForCausalLM
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int32_t vocab_size = 0;
  int32_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q, k and v projections have biases (Qwen2); o_proj and the MLP never do
  bool tie_word_embeddings = false;
  DType dtype = DType::f32;  // torch_dtype: the checkpoint's storage type
  int32_t bos_token_id = 1;
  std::vector<int32_t> eos_token_ids{2};
  bool add_bos_token = true;
  // Mistral: a token at position p attends to positions (p - window, p].
  // nullopt (or a window at least the context) means the whole context.
  std::optional<int32_t> sliding_window;

  int64_t num_parameters() const;
  // K and V for one token across all layers, in bytes of the given KV dtype:
  // 2 x num_layers x num_kv_heads x head_dim x dtype_size. For i8 the
  // per-group scales are added: one f32 per `group_size` elements along
  // head_dim (a trailing partial group gets its own scale).
  int64_t kv_bytes_per_token(DType kv_dtype = DType::f32, int32_t group_size = 8) const;

  bool operator==(const ModelConfig&) const = default;
};

// Reads config.json (and generation_config.json / tokenizer_config.json when
// present) from a model directory. Throws Error(bad_checkpoint/unsupported)
// naming the file and key, e.g. "config.json: num_key_value_heads=3 does not
// divide num_attention_heads=8"; Error(not_found) when the directory is absent.
// generation_config.json's bos/eos ids win over config.json's;
// tokenizer_config.json supplies add_bos_token.
ModelConfig load_model_config(const std::filesystem::path& model_dir);
// What load_model_config takes from the folder beside config.json (generation_config.json's ids,
// tokenizer_config.json's add_bos_token), for loaders that parse config.json themselves.
void apply_folder_configs(ModelConfig& config, const std::filesystem::path& model_dir);
// Parses one config.json file; `source` names it in errors. Absent keys take
// transformers' defaults (num_key_value_heads = heads, head_dim = hidden /
// heads, rms_norm_eps 1e-6, rope_theta 10000, untied, float32). Qwen2 has
// q/k/v biases by architecture; its sliding_window applies only with
// use_sliding_window (refused: per-layer windows), otherwise it is ignored.
// rope_scaling (key "rope_type" or "type"): llama3 (factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings
// required), linear (factor), default/null. Refused with
// Error(unsupported): other architectures, hidden_act other than silu,
// Llama/Mistral attention_bias or mlp_bias (they bias o_proj / the MLP too),
// other rope_scaling types (dynamic, yarn, longrope, ...),
// a quantization_config whose quant_method is not gptq or awq.
ModelConfig parse_model_config_json(const std::string& text, const std::string& source);

// Named presets for dummy weights: llama-110m, tinyllama-1.1b, llama2-7b,
// llama3-8b, llama3.2-1b, qwen2.5-0.5b, mistral-7b. `name` may also be a path to a config.json file or to a model
// directory holding one (parsed as above, errors thrown). nullopt when it is
// neither a preset nor an existing path.
std::optional<ModelConfig> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace llmk
