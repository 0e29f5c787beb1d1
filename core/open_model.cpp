// The model entry point every command uses: load_format and preset
// resolution, and the default tokenizer for dummy weights.
#include <cstdlib>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_checkpoint.hpp"

#ifndef LLMK_DEFAULT_SHARED_DIR
#define LLMK_DEFAULT_SHARED_DIR ""
#endif

namespace llmk {

namespace fs = std::filesystem;

fs::path default_tokenizer_path() {
  const fs::path rel = fs::path("models") / "llama2-tokenizer" / "tokenizer.model";
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("LLMK_SHARED_DIR"); env && *env) candidates.push_back(fs::path(env) / rel);
  candidates.push_back(fs::path("..") / "shared" / rel);
  if (*LLMK_DEFAULT_SHARED_DIR) candidates.push_back(fs::path(LLMK_DEFAULT_SHARED_DIR) / rel);
  std::string tried;
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec);
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  throw Error(ErrorCode::not_found,
              "model.tokenizer: no tokenizer given for dummy weights and the default was not found (tried " + tried +
                  "); pass --tokenizer FILE");
}

std::string resolve_load_format(const ModelSection& s) {
  if (s.load_format == "safetensors" || s.load_format == "gguf" || s.load_format == "dummy") return s.load_format;
  if (s.load_format != "auto")
    throw Error(ErrorCode::invalid_config,
                "model.load_format: '" + s.load_format + "' is not allowed (allowed: auto, safetensors, gguf, dummy)");
  if (!s.path.empty()) {
    std::error_code ec;
    if (!fs::exists(s.path, ec)) {
      const bool named_gguf = fs::path(s.path).extension() == ".gguf";
      throw Error(ErrorCode::not_found,
                  "model.path: '" + s.path + "' does not exist (looked for " +
                      (named_gguf ? "a GGUF file" : "a Hugging Face model directory or a GGUF file") + ")");
    }
    return is_gguf_file(s.path) ? "gguf" : "safetensors";
  }
  if (!s.preset.empty()) return "dummy";
  throw Error(ErrorCode::invalid_config,
              "model.path: no model given: pass --model DIR (a Hugging Face directory) or --load-format dummy "
              "--preset NAME");
}

ModelConfig resolve_model_config(const ModelSection& s) {
  if (resolve_load_format(s) == "dummy") {
    std::string names;
    for (const auto& n : model_preset_names()) names += (names.empty() ? "" : ", ") + n;
    if (s.preset.empty())
      throw Error(ErrorCode::invalid_config,
                  "model.preset: required with load_format dummy (presets: " + names + ", or a config.json path)");
    auto c = model_preset(s.preset);
    if (!c)
      throw Error(ErrorCode::invalid_config, "model.preset: '" + s.preset + "' is neither a preset (" + names +
                                                 ") nor an existing config.json or model directory");
    return *c;
  }
  if (s.path.empty()) throw Error(ErrorCode::invalid_config, "model.path: required with load_format safetensors");
  if (resolve_load_format(s) == "gguf") return load_gguf_model_config(s.path);
  return load_model_config(s.path);
}

std::shared_ptr<const Checkpoint> open_model(const ModelSection& s) {
  if (!s.tokenizer.empty() && !fs::is_regular_file(s.tokenizer))
    throw Error(ErrorCode::not_found, "model.tokenizer: '" + s.tokenizer + "' does not exist");
  std::unique_ptr<Checkpoint> checkpoint;
  if (resolve_load_format(s) == "dummy") {
    const ModelConfig config = resolve_model_config(s);
    const fs::path tokenizer = s.tokenizer.empty() ? default_tokenizer_path() : fs::path(s.tokenizer);
    checkpoint = make_dummy_checkpoint(config, s.seed, tokenizer);
  } else {
    if (s.path.empty()) throw Error(ErrorCode::invalid_config, "model.path: required with load_format safetensors");
    checkpoint = resolve_load_format(s) == "gguf" ? load_gguf_checkpoint(s.path) : load_checkpoint(s.path);
    if (!s.tokenizer.empty()) checkpoint->set_tokenizer_path(s.tokenizer);
  }
  return checkpoint;
}

}  // namespace llmk
