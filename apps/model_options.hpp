// Options every command that needs a model shares: where the model is, how
// to load it, which config file and overrides apply. CLI11 stays out of this
// header (it costs seconds per file that includes it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace CLI {
class App;
}

namespace llmk::app {

struct ModelOptions {
  std::string model_dir;                // --model DIR
  std::string load_format;              // --load-format auto|safetensors|dummy ("" = from config)
  std::string preset;                   // --preset NAME|config.json
  std::string tokenizer;                // --tokenizer FILE
  std::string chat_template;            // --chat-template FILE (or a built-in name)
  std::string config_file;              // --config FILE (YAML)
  std::vector<std::string> overrides;   // --set KEY=VALUE, repeatable
  int32_t num_threads = -1;             // --threads N (-1 = from config)
};

// Adds --model, --load-format, --preset, --tokenizer, --chat-template, --config, --set and
// --threads to `cmd`, writing into `options` (which must outlive parsing).
void add_model_options(CLI::App& cmd, ModelOptions& options);

// Defaults, then --config, then --set, then the model flags above (which
// win over both for the keys they name); validated. Throws
// Error(invalid_config) naming the key.
EngineConfig build_engine_config(const ModelOptions& options);

}  // namespace llmk::app
