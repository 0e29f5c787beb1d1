// Shared by the Engine benchmark programs (batching, kv_allocators): flag
// parsing, the engine config for a model, and running one workload on a
// fresh Engine through the llmk bench runner.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "apps/bench/runner.hpp"
#include "apps/bench/targets.hpp"
#include "apps/bench/workload.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"

namespace llmk::bench_programs {

// --key value pairs; flags without a value are refused.
class Flags {
 public:
  Flags(int argc, char** argv, const std::map<std::string, std::string>& defaults) : values_(defaults) {
    for (int i = 1; i < argc; ++i) {
      const std::string key = argv[i];
      if (key == "--help" || key == "-h") {
        usage();
        std::exit(0);
      }
      if (key.rfind("--", 0) != 0 || !values_.count(key.substr(2)) || i + 1 >= argc) {
        std::fprintf(stderr, "unknown flag or missing value: %s\n", key.c_str());
        usage();
        std::exit(2);
      }
      values_[key.substr(2)] = argv[++i];
    }
  }
  bool has(const std::string& k) const { return values_.count(k) != 0; }
  std::string str(const std::string& k) const { return values_.at(k); }
  int num(const std::string& k) const { return std::stoi(values_.at(k)); }
  double real(const std::string& k) const { return std::stod(values_.at(k)); }
  void print() const {
    std::printf("options:");
    for (const auto& [k, v] : values_) std::printf(" --%s %s", k.c_str(), v.empty() ? "\"\"" : v.c_str());
    std::printf("\n");
  }

 private:
  void usage() const {
    std::fprintf(stderr, "flags (defaults):\n");
    for (const auto& [k, v] : values_) std::fprintf(stderr, "  --%s %s\n", k.c_str(), v.c_str());
  }
  std::map<std::string, std::string> values_;
};

// --model DIR (safetensors) wins over --preset NAME (dummy weights).
inline EngineConfig base_config(const Flags& f) {
  EngineConfig cfg;
  if (!f.str("model").empty()) {
    cfg.model.path = f.str("model");
  } else {
    cfg.model.preset = f.str("preset");
    cfg.model.load_format = "dummy";
  }
  cfg.executor.num_threads = f.num("threads");
  if (f.has("linear")) cfg.plugins.linear = f.str("linear");
  if (f.has("linear-options")) cfg.plugins.linear_options = f.str("linear-options");
  // --set "a.b=1;c.d=x": config overrides, as `llmk --set` takes them.
  if (f.has("set")) {
    std::stringstream overrides(f.str("set"));
    for (std::string kv; std::getline(overrides, kv, ';');)
      if (!kv.empty()) apply_override(cfg, kv);
  }
  return cfg;
}

// trace_file: a Chrome trace of the run's per-step spans ("" = none).
inline bench::RunResult run_on_engine(const EngineConfig& cfg, const std::vector<bench::BenchRequest>& workload,
                                      bool progress = true, const std::string& trace_file = "") {
  validate(cfg);
  EngineOptions options;
  options.trace_file = trace_file;
  Engine engine(cfg, options);
  auto target = bench::make_engine_target(engine);
  bench::RunOptions o;
  o.progress = progress;
  o.stats_interval_s = 0.02;
  return bench::run_workload(*target, workload, o);
}

// The synthetic workload of the --num-requests, --input-len, --output-len and
// --seed flags, over the model's vocabulary.
inline bench::WorkloadSpec workload_spec_from_flags(const Flags& f, const ModelConfig& model) {
  bench::WorkloadSpec spec;
  spec.num_requests = f.num("num-requests");
  spec.input_len = bench::parse_length_range(f.str("input-len"), "--input-len");
  spec.output_len = bench::parse_length_range(f.str("output-len"), "--output-len");
  spec.vocab_size = model.vocab_size;
  spec.bos_token_id = model.bos_token_id;
  spec.seed = static_cast<uint64_t>(f.num("seed"));
  return spec;
}

// Model vocabulary for synthetic prompts, without loading weights.
inline ModelConfig model_of(const EngineConfig& cfg) {
  if (!cfg.model.path.empty()) return load_model_config(cfg.model.path);
  auto m = model_preset(cfg.model.preset);
  if (!m) throw Error(ErrorCode::invalid_argument, "unknown preset '" + cfg.model.preset + "'");
  return *m;
}

}  // namespace llmk::bench_programs
