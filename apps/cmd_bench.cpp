// llmk bench: measures throughput and latency of a workload, in process
// (an Engine built from the model options) or against `llmk serve` over
// ZeroMQ or HTTP. Times are client-side, taken as events arrive.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>

#include "apps/bench/report.hpp"
#include "apps/bench/targets.hpp"
#include "apps/bench_options.hpp"
#include "apps/command.hpp"
#include "apps/model_options.hpp"
#include "apps/parallel_launch.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"
#ifdef LLMK_BENCH_HAVE_ENGINE
#include "actors/engine.hpp"
#endif

namespace llmk::app {
namespace {

struct BenchCommandOptions {
  ModelOptions model;
  BenchFlags flags;
  std::string backend = "engine";           // engine | zmq | http
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string url = "127.0.0.1:8000";
  std::string api_key;                      // http: else LLMK_API_KEY
  std::string ca_file;                      // http: https only
  std::string served_model;
  int32_t vocab_size = 32000;               // serving mode: token ids of synthetic prompts
  int32_t bos_token_id = 1;
};

int run_bench(bench::Target& target, const BenchCommandOptions& o, int32_t vocab_size, int32_t bos) {
  const bench::WorkloadSpec spec = workload_spec(o.flags, vocab_size, bos);
  const auto workload = bench::make_workload(spec);
  const auto warmup = warmup_requests(o.flags, vocab_size, bos);
  std::fprintf(stderr, "bench: %s against %s\n", describe(spec).c_str(), target.name().c_str());
  if (!warmup.empty()) {
    spdlog::info("bench: {} warm-up requests", warmup.size());
    bench::run_warmup(target, warmup, o.flags.max_concurrency);
  }
  const bench::RunResult result = bench::run_workload(target, workload, run_options(o.flags));
  std::printf("%s", bench::format_table(result).c_str());
  if (!o.flags.json_file.empty()) {
    nlohmann::json j = bench::to_json(result);
    j["workload"] = describe(spec);
    j["target"] = target.name();
    std::ofstream out(o.flags.json_file);
    if (!out) throw Error(ErrorCode::invalid_argument, "bench: cannot write '" + o.flags.json_file + "'");
    out << j.dump(2) << "\n";
  }
  return result.summary.num_errors == 0 ? 0 : 1;
}

const CommandRegistration registration{
    "bench", "Throughput and latency of a workload, in process or against llmk serve",
    [](CLI::App& cmd) {
      auto o = std::make_shared<BenchCommandOptions>();
      add_model_options(cmd, o->model);
      add_bench_options(cmd, o->flags);
      cmd.add_option("--backend", o->backend, "engine (in process), zmq or http")->capture_default_str();
      cmd.add_option("--endpoint", o->endpoint, "zmq: the server's endpoint")->capture_default_str();
      cmd.add_option("--url", o->url, "http: HOST:PORT, http://HOST:PORT or https://HOST:PORT of the server")
          ->capture_default_str();
      cmd.add_option("--api-key", o->api_key,
                     "http: sent as 'Authorization: Bearer KEY' (default: the environment variable LLMK_API_KEY)");
      cmd.add_option("--ca-file", o->ca_file,
                     "http: PEM of the CAs that sign an https:// server's certificate (default: the system's trust "
                     "store)")
          ->check(CLI::ExistingFile);
      cmd.add_option("--served-model", o->served_model, "http: the \"model\" field");
      cmd.add_option("--vocab-size", o->vocab_size, "zmq/http: synthetic token ids are below this")->capture_default_str();
      cmd.add_option("--bos-token-id", o->bos_token_id, "zmq/http: first token of synthetic prompts (-1: none)")
          ->capture_default_str();
      return [o]() -> int {
        if (o->backend == "engine") {
#ifdef LLMK_BENCH_HAVE_ENGINE
          // Under mpirun rank 0 runs the benchmark; the other ranks serve its steps.
          const EngineConfig cfg = build_engine_config(o->model);
          if (const std::optional<int> code = serve_steps_unless_rank0(cfg)) return *code;
          Engine engine(cfg);
          auto target = bench::make_engine_target(engine);
          const ModelConfig& m = engine.model_config();
          return run_bench(*target, *o, m.vocab_size, m.add_bos_token ? m.bos_token_id : -1);
#else
          throw Error(ErrorCode::unsupported, "bench: this build has no in-process engine; use --backend zmq or http");
#endif
        }
        if (o->backend == "zmq") {
#ifdef LLMK_BENCH_HAVE_ZMQ
          auto target = bench::make_zmq_target(o->endpoint);
          return run_bench(*target, *o, o->vocab_size, o->bos_token_id);
#else
          throw Error(ErrorCode::unsupported, "bench: this build has no ZeroMQ client; use --backend http");
#endif
        }
        if (o->backend == "http") {
          bench::HttpEndpoint endpoint = bench::parse_http_url(o->url);
          if (!o->ca_file.empty() && !endpoint.tls) {
            throw Error(ErrorCode::invalid_argument, "bench: --ca-file needs an https:// --url (got '" + o->url + "')");
          }
          endpoint.ca_file = o->ca_file;
          endpoint.api_key = o->api_key;
          if (const char* env = std::getenv("LLMK_API_KEY"); endpoint.api_key.empty() && env != nullptr) {
            endpoint.api_key = env;
          }
          auto target = bench::make_http_target(endpoint, o->served_model);
          return run_bench(*target, *o, o->vocab_size, o->bos_token_id);
        }
        throw Error(ErrorCode::invalid_argument, "bench: --backend '" + o->backend + "' (allowed: engine, zmq, http)");
      };
    }};

}  // namespace
}  // namespace llmk::app
