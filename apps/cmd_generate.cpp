// llmk generate: one prompt, streamed to stdout as it is generated.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/command.hpp"
#include "apps/model_options.hpp"
#include "core/checkpoint.hpp"
#include "core/generate.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/tokenizer.hpp"

namespace llmk::app {
namespace {

struct GenerateOptions {
  ModelOptions model;
  std::string prompt;
  int32_t max_tokens = 128;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  int64_t seed = -1;
  bool ignore_eos = false;
};

int run_generate(const GenerateOptions& o) {
  EngineConfig cfg = build_engine_config(o.model);
  std::shared_ptr<const Checkpoint> checkpoint = open_model(cfg.model);
  const ModelConfig& mc = checkpoint->config();
  // One sequence never needs more KV slots than the context holds.
  if (cfg.kv_cache.capacity_tokens == 0 && cfg.kv_cache.capacity_bytes == 0)
    cfg.kv_cache.capacity_tokens = cfg.kv_cache.max_seq_len > 0 ? cfg.kv_cache.max_seq_len
                                                                : static_cast<uint32_t>(mc.max_position_embeddings);
  const ModelRuntime rt = resolve_runtime(cfg, mc);
  std::vector<std::filesystem::path> search(cfg.plugins.search_path.begin(), cfg.plugins.search_path.end());
  PluginRegistry plugins(search);
  Model model(checkpoint, plugins, cfg, rt);
  Tokenizer tokenizer(checkpoint->tokenizer_path());
  spdlog::info("weights: {:.1f} MiB as loaded ({} checkpoint)", model.weight_bytes() / 1048576.0, dtype_name(mc.dtype));

  std::vector<int32_t> ids = tokenizer.encode(o.prompt, mc.add_bos_token);
  if (ids.empty()) ids.push_back(mc.bos_token_id);  // empty prompt: start from BOS
  SamplingParams params;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  params.max_tokens = o.max_tokens;
  params.ignore_eos = o.ignore_eos;
  if (o.seed >= 0) params.seed = static_cast<uint64_t>(o.seed);

  IncrementalDetokenizer detok(tokenizer, /*continues_prompt=*/!o.prompt.empty());
  const std::vector<int32_t>& eos = mc.eos_token_ids;
  const GenerateResult r = generate(model, ids, params, eos, [&](int32_t id) {
    if (!params.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) return true;  // EOS prints nothing
    const std::string text = detok.push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  const std::string rest = detok.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  std::fflush(stdout);
  const size_t n = r.token_ids.size();
  spdlog::info("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens, decode {:.1f} tok/s; finish: {}",
               ids.size(), r.prefill_seconds, ids.size() / std::max(r.prefill_seconds, 1e-9), n,
               n > 1 ? (n - 1) / std::max(r.decode_seconds, 1e-9) : 0.0,
               r.finish_reason == FinishReason::length ? "length" : "stop");
  return 0;
}

const CommandRegistration registration("generate", "Generate text for one prompt, streamed to stdout", [](CLI::App& cmd) {
  auto o = std::make_shared<GenerateOptions>();
  add_model_options(cmd, o->model);
  cmd.add_option("--prompt", o->prompt, "prompt text (empty: start from BOS)");
  cmd.add_option("--max-tokens", o->max_tokens, "most tokens to generate")->capture_default_str();
  cmd.add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
  cmd.add_option("--top-p", o->top_p, "1 = off")->capture_default_str();
  cmd.add_option("--seed", o->seed, "sampling seed (-1: random)")->capture_default_str();
  cmd.add_flag("--ignore-eos", o->ignore_eos, "keep generating past EOS");
  return [o] { return run_generate(*o); };
});

}  // namespace
}  // namespace llmk::app
