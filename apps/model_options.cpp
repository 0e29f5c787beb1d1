#include "apps/model_options.hpp"

#include <CLI/CLI.hpp>

namespace llmk::app {

void add_model_options(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("--model", o.model_dir,
                 "Hugging Face model directory (config.json, *.safetensors, tokenizer.model or tokenizer.json) or a "
                 ".gguf file");
  cmd.add_option("--load-format", o.load_format, "auto, safetensors, gguf or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "gguf", "dummy"}));
  cmd.add_option("--preset", o.preset,
                 "model shape for dummy weights: llama-110m, tinyllama-1.1b, llama2-7b, llama3-8b, llama3.2-1b, "
                 "qwen2.5-0.5b, mistral-7b or a config.json");
  cmd.add_option("--tokenizer", o.tokenizer, "tokenizer.model or tokenizer.json to use instead of the model's");
  cmd.add_option("--chat-template", o.chat_template,
                 "Jinja chat template file to use instead of the model's (or llama-2, chatml)");
  cmd.add_option("--config", o.config_file, "YAML engine configuration (see config/default.yaml)");
  cmd.add_option("--set", o.overrides, "override one config key, e.g. --set scheduler.max_num_seqs=32 (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  cmd.add_option("--threads", o.num_threads, "compute threads (0 = all cores)");
}

EngineConfig build_engine_config(const ModelOptions& o) {
  EngineConfig cfg;
  if (!o.config_file.empty()) apply_yaml_file(cfg, o.config_file);
  for (const auto& kv : o.overrides) apply_override(cfg, kv);
  if (!o.model_dir.empty()) cfg.model.path = o.model_dir;
  if (!o.load_format.empty()) cfg.model.load_format = o.load_format;
  if (!o.preset.empty()) cfg.model.preset = o.preset;
  if (!o.tokenizer.empty()) cfg.model.tokenizer = o.tokenizer;
  if (!o.chat_template.empty()) cfg.model.chat_template = o.chat_template;
  if (o.num_threads >= 0) cfg.executor.num_threads = o.num_threads;
  validate(cfg);
  return cfg;
}

}  // namespace llmk::app
