// llmk ab: the identical workload (same prompts, arrivals and seeds) run in
// process against two or more configurations, one after the other; a
// side-by-side table with ratios, a verdict on greedy-output equality, and
// an optional self-contained HTML report. When the configurations differ in
// linear plugin, KV dtype or attention plugin, each is also evaluated on a
// text (apps/eval/compare.hpp): perplexity, and KL divergence and top-1
// agreement against the first.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "actors/engine.hpp"
#include "apps/bench/report.hpp"
#include "apps/bench/targets.hpp"
#include "apps/bench_options.hpp"
#include "apps/command.hpp"
#include "apps/eval/compare.hpp"
#include "apps/model_options.hpp"
#include "core/error.hpp"

namespace llmk::app {
namespace {

struct AbOptions {
  ModelOptions model;
  BenchFlags flags;
  std::vector<std::string> configs;
  std::string report_file;
  std::string eval_text_file;  // "" = the built-in text
  int32_t eval_ctx = 256;
  int32_t eval_chunks = 4;
  bool no_eval = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::invalid_argument, "ab: cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw Error(ErrorCode::invalid_argument, "ab: cannot write '" + path + "'");
  out << text;
}

int run_ab(const AbOptions& o) {
  std::vector<bench::Contender> contenders;
  std::vector<EngineConfig> configs;
  std::string workload_text;
  for (const std::string& file : o.configs) {
    EngineConfig cfg = build_engine_config(o.model);
    const std::string text = read_text(file);
    apply_yaml(cfg, text, file);
    validate(cfg);
    configs.push_back(cfg);
    spdlog::info("ab: starting the engine for {}", file);
    Engine engine(cfg);
    auto target = bench::make_engine_target(engine);
    const ModelConfig& m = engine.model_config();
    const int32_t bos = m.add_bos_token ? m.bos_token_id : -1;
    // Same flags and model, so the same workload for every contender.
    const bench::WorkloadSpec spec = workload_spec(o.flags, m.vocab_size, bos);
    workload_text = describe(spec);
    const auto workload = bench::make_workload(spec);
    bench::run_warmup(*target, warmup_requests(o.flags, m.vocab_size, bos), o.flags.max_concurrency);
    std::fprintf(stderr, "ab: %s: %s\n", file.c_str(), workload_text.c_str());
    bench::Contender c;
    c.name = std::filesystem::path(file).stem().string();
    for (const auto& other : contenders) {
      if (other.name == c.name) c.name = file;  // same stem in two folders
    }
    c.config_text = text;
    c.result = bench::run_workload(*target, workload, run_options(o.flags));
    contenders.push_back(std::move(c));
  }
  std::vector<bench::OutputDiff> diffs;
  for (size_t k = 1; k < contenders.size(); ++k) diffs.push_back(bench::compare_outputs(contenders[0].result, contenders[k].result));
  std::printf("%s\n", workload_text.c_str());
  std::printf("%s", bench::format_comparison(contenders, diffs).c_str());
  std::optional<eval::QualityComparison> quality;
  std::string differ;
  for (size_t k = 1; k < configs.size() && differ.empty(); ++k) differ = eval::quality_difference(configs[0], configs[k]);
  if (!o.no_eval && !differ.empty()) {
    eval::EvalSetup setup;
    setup.text = o.eval_text_file.empty() ? eval::default_text() : read_text(o.eval_text_file);
    setup.text_name = o.eval_text_file.empty() ? "the built-in text" : o.eval_text_file;
    setup.ctx = o.eval_ctx;
    setup.max_chunks = o.eval_chunks;
    std::vector<std::string> names;
    for (const auto& c : contenders) names.push_back(c.name);
    std::fprintf(stderr, "ab: the configs differ in %s: measuring quality\n", differ.c_str());
    quality = eval::compare_quality(configs, names, setup);
    std::printf("\n%s", eval::format_quality(*quality).c_str());
  }
  if (!o.flags.json_file.empty()) {
    nlohmann::json j = bench::comparison_json(contenders, diffs);
    j["workload"] = workload_text;
    if (quality) j["quality"] = eval::quality_json(*quality);
    write_text(o.flags.json_file, j.dump(2) + "\n");
  }
  if (!o.report_file.empty()) {
    write_text(o.report_file, bench::html_report("llmk ab", workload_text, contenders, diffs));
    std::fprintf(stderr, "ab: report written to %s\n", o.report_file.c_str());
  }
  for (const auto& c : contenders) {
    if (c.result.summary.num_errors > 0) return 1;
  }
  return 0;
}

const CommandRegistration registration{
    "ab", "Run one workload against several configurations and compare (table, output equality, HTML report)",
    [](CLI::App& cmd) {
      auto o = std::make_shared<AbOptions>();
      cmd.add_option("configs", o->configs, "YAML files, each applied over the model options (first = A)")
          ->required()
          ->expected(2, 16)
          ->check(CLI::ExistingFile);
      add_model_options(cmd, o->model);
      add_bench_options(cmd, o->flags);
      cmd.add_option("--report", o->report_file, "write a self-contained HTML report here");
      cmd.add_option("--eval-text", o->eval_text_file,
                     "text for the quality figures (perplexity, KL, top-1) when the configs differ in linear plugin, "
                     "KV dtype or attention plugin (default: a built-in text)")
          ->check(CLI::ExistingFile);
      cmd.add_option("--eval-ctx", o->eval_ctx, "tokens per chunk for the quality figures")->capture_default_str();
      cmd.add_option("--eval-chunks", o->eval_chunks, "chunks scored for the quality figures (-1: all)")
          ->capture_default_str();
      cmd.add_flag("--no-eval", o->no_eval, "speed only: skip the quality figures");
      return [o]() -> int { return run_ab(*o); };
    }};

}  // namespace
}  // namespace llmk::app
