#include "apps/eval/session.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "apps/eval/stream.hpp"
#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/plugin_loader.hpp"
#include "core/tokenizer.hpp"

namespace llmk::eval {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The settings that change the numbers: device, linear and attention plugins
// (for a GGUF file, the one its quantized blocks go to), the KV dtype as the
// executor resolved it (kv_cache.dtype may be auto).
std::string describe_config(const EngineConfig& cfg, DType kv_dtype) {
  std::string out = cfg.executor.device + ", linear " + cfg.plugins.linear;
  if (cfg.plugins.linear_options != "{}") out += " " + cfg.plugins.linear_options;
  if (resolve_load_format(cfg.model) == "gguf") out += ", quantized blocks " + cfg.plugins.linear_blocks;
  out += ", attention " + cfg.plugins.attention;
  if (cfg.plugins.attention_options != "{}") out += " " + cfg.plugins.attention_options;
  return out + ", kv " + dtype_name(kv_dtype);
}

}  // namespace

namespace {

// --stream: one sequence through the cache's window (apps/eval/stream.hpp).
EvalReport run_stream_eval(EngineConfig cfg, const EvalSetup& s) {
  if (!s.kl_base.empty() || !s.save_logits.empty())
    throw Error(ErrorCode::invalid_argument, "eval: --stream scores one sequence; --save-logits and --kl-base "
                                             "compare chunked runs only");
  const std::shared_ptr<const Checkpoint> checkpoint = open_model(cfg.model);
  if (checkpoint->tokenizer_path().empty())
    throw Error(ErrorCode::not_found, "eval: no tokenizer for model '" + cfg.model.path + "' (set model.tokenizer)");
  const Tokenizer tokenizer(checkpoint->tokenizer_path());
  const ModelConfig& mc = checkpoint->config();
  std::vector<int32_t> tokens = tokenizer.encode(s.text, mc.add_bos_token && mc.bos_token_id >= 0);
  if (s.stream > 0 && static_cast<size_t>(s.stream) < tokens.size()) tokens.resize(static_cast<size_t>(s.stream));
  const uint32_t block = cfg.kv_cache.block_size;
  const uint32_t rows = cfg.kv_cache.window > 0 ? cfg.kv_cache.window : static_cast<uint32_t>(tokens.size());
  cfg.kv_cache.capacity_tokens = (rows + block - 1) / block * block;
  cfg.scheduler.max_num_batched_tokens = static_cast<uint32_t>(std::max(1, s.batch));
  validate(cfg);

  PluginRegistry plugins(
      std::vector<std::filesystem::path>(cfg.plugins.search_path.begin(), cfg.plugins.search_path.end()));
  const std::unique_ptr<Executor> executor = make_executor(cfg, checkpoint, plugins);
  EvalReport report;
  report.model = cfg.model.path;
  report.config = describe_config(cfg, executor->runtime().kv_dtype);
  report.num_text_tokens = static_cast<int64_t>(tokens.size());
  report.stream = true;
  report.window = static_cast<int32_t>(cfg.kv_cache.window);
  report.sink_tokens = report.window > 0 ? static_cast<int32_t>(cfg.kv_cache.sink_tokens) : 0;
  StreamRun run;
  run.tokens = tokens;
  run.window = report.window;
  run.sink_tokens = report.sink_tokens;
  run.batch = std::min<int32_t>(s.batch, static_cast<int32_t>(rows) - report.sink_tokens);
  run.block_size = static_cast<int32_t>(block);
  run.on_progress = s.on_chunk;
  report.stream_batch = run.batch;
  report.result = evaluate_stream(*executor, run, &report.peak_kv_rows);
  return report;
}

}  // namespace

EvalReport run_eval(EngineConfig cfg, const EvalSetup& setup) {
  if (setup.stream >= 0) return run_stream_eval(std::move(cfg), setup);
  std::optional<LogitsReader> base;
  EvalSetup s = setup;
  if (!s.kl_base.empty()) {
    base.emplace(s.kl_base);
    if (s.ctx_from_base) {
      s.ctx = base->identity().plan.ctx;
      s.max_chunks = base->identity().plan.num_chunks;
    }
  }
  const uint32_t block = cfg.kv_cache.block_size;
  cfg.kv_cache.capacity_tokens = (static_cast<uint32_t>(s.ctx) + block - 1) / block * block;
  cfg.scheduler.max_num_batched_tokens = static_cast<uint32_t>(std::max(1, std::min(s.batch, s.ctx)));
  validate(cfg);

  const std::shared_ptr<const Checkpoint> checkpoint = open_model(cfg.model);
  if (checkpoint->tokenizer_path().empty())
    throw Error(ErrorCode::not_found, "eval: no tokenizer for model '" + cfg.model.path + "' (set model.tokenizer)");
  const Tokenizer tokenizer(checkpoint->tokenizer_path());
  const ModelConfig& mc = checkpoint->config();
  const bool add_bos = mc.add_bos_token && mc.bos_token_id >= 0;
  const std::vector<int32_t> tokens = tokenizer.encode(s.text, add_bos);
  const ChunkPlan plan =
      plan_chunks(static_cast<int64_t>(tokens.size()), s.ctx, s.max_chunks, add_bos ? mc.bos_token_id : -1);

  PluginRegistry plugins(
      std::vector<std::filesystem::path>(cfg.plugins.search_path.begin(), cfg.plugins.search_path.end()));
  const std::unique_ptr<Executor> executor = make_executor(cfg, checkpoint, plugins);

  EvalReport report;
  report.model = cfg.model.path;
  report.config = describe_config(cfg, executor->runtime().kv_dtype);
  report.num_text_tokens = static_cast<int64_t>(tokens.size());
  const RunIdentity identity = make_identity(cfg.model.path, mc, s.text_name, report.config, plan, tokens);
  if (base) {
    check_same_run(base->identity(), identity, s.kl_base);
    report.base_config = base->identity().config;
  }
  std::optional<LogitsWriter> writer;
  if (!s.save_logits.empty()) writer.emplace(s.save_logits, identity);

  EvalRun run;
  run.tokens = tokens;
  run.plan = plan;
  run.batch = static_cast<int32_t>(cfg.scheduler.max_num_batched_tokens);
  run.block_size = static_cast<int32_t>(block);
  run.save = writer ? &*writer : nullptr;
  run.base = base ? &*base : nullptr;
  run.on_chunk = s.on_chunk;
  report.result = evaluate(*executor, run);
  return report;
}

std::string format_report(const EvalReport& rep) {
  const EvalResult& r = rep.result;
  const ChunkPlan& p = r.plan;
  std::string out;
  out += "model       " + rep.model + "\n";
  out += "config      " + rep.config + "\n";
  if (rep.stream)
    out += "tokens      " + std::to_string(rep.num_text_tokens) + " streamed, " + std::to_string(rep.stream_batch) +
           " a step, through " +
           (rep.window > 0 ? "a window of " + std::to_string(rep.window) + " (" + std::to_string(rep.sink_tokens) +
                                 " sinks)"
                           : std::string("full attention")) +
           "; at most " + std::to_string(rep.peak_kv_rows) + " K/V rows; " + std::to_string(r.nll.count) +
           " scored\n";
  else
    out += "tokens      " + std::to_string(rep.num_text_tokens) + " in the text; " + std::to_string(p.num_chunks) +
           " chunks of " + std::to_string(p.ctx) + ", " + std::to_string(r.nll.count) + " scored\n";
  out += "perplexity  " + fixed(perplexity(r.nll), 4) + " +/- " + fixed(perplexity_uncertainty(r.nll), 5) + "\n";
  if (r.has_base) {
    out += "base        " + rep.base_config + "\n";
    out += "base ppl    " + fixed(perplexity(r.base_nll), 4) + " +/- " + fixed(perplexity_uncertainty(r.base_nll), 5) +
           "\n";
    out += "KL mean     " + fixed(r.kl.mean(), 6) + " +/- " + fixed(r.kl.standard_error(), 6) + "\n";
    out += "KL median   " + fixed(r.kl_median(), 6) + "\n";
    out += "KL max      " + fixed(r.kl_max(), 6) + "\n";
    out += "top-1       " + fixed(100.0 * r.top1_agreement(), 3) + " % agree with the base\n";
  }
  out += "time        " + fixed(r.seconds, 2) + " s\n";
  return out;
}

nlohmann::json report_json(const EvalReport& rep) {
  const EvalResult& r = rep.result;
  nlohmann::json j = {{"model", rep.model},
                      {"config", rep.config},
                      {"num_text_tokens", rep.num_text_tokens},
                      {"ctx", r.plan.ctx},
                      {"num_chunks", r.plan.num_chunks},
                      {"num_scored", r.nll.count},
                      {"perplexity", perplexity(r.nll)},
                      {"perplexity_uncertainty", perplexity_uncertainty(r.nll)},
                      {"mean_nll", r.nll.mean()},
                      {"seconds", r.seconds}};
  if (rep.stream)
    j["stream"] = {{"window", rep.window},
                   {"sink_tokens", rep.sink_tokens},
                   {"batch", rep.stream_batch},
                   {"peak_kv_rows", rep.peak_kv_rows}};
  if (r.has_base) {
    j["base"] = {{"config", rep.base_config},
                 {"perplexity", perplexity(r.base_nll)},
                 {"perplexity_uncertainty", perplexity_uncertainty(r.base_nll)}};
    j["kl"] = {{"mean", r.kl.mean()},
               {"mean_uncertainty", r.kl.standard_error()},
               {"median", r.kl_median()},
               {"max", r.kl_max()}};
    j["top1_agreement"] = r.top1_agreement();
  }
  return j;
}

}  // namespace llmk::eval
