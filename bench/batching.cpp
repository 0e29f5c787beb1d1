// Continuous vs static vs one-at-a-time batching on one burst of identical
// requests (default: 256 requests, 128-token prompts, 128 output tokens,
// llama-110m dummy weights): output tokens/s, mean batch occupancy and
// TTFT p50/p99, with ratios to one-at-a-time.
//
//   bench_batching [--preset llama-110m] [--model DIR] [--num-requests 256]
//                  [--input-len 128] [--output-len 128] [--max-num-seqs 64]
//                  [--threads 0] [--modes continuous,static,one]
//                  [--kv-dtype f32|f16|i8] [--trace PREFIX]
//                  [--linear linear.dense] [--linear-options JSON]
//                  [--set "section.key=value;..."]   (config overrides, applied first)
// --trace PREFIX writes PREFIX.<mode>.json, a Chrome trace of each mode's steps.
#include <cstdio>
#include <sstream>

#include "bench/engine_bench_common.hpp"
#include "core/dtype.hpp"

using namespace llmk;
using namespace llmk::bench_programs;

int main(int argc, char** argv) try {
  const Flags f(argc, argv,
                {{"preset", "llama-110m"}, {"model", ""}, {"num-requests", "256"}, {"input-len", "128"},
                 {"output-len", "128"}, {"max-num-seqs", "64"}, {"threads", "0"}, {"seed", "0"},
                 {"modes", "continuous,static,one"}, {"max-num-batched-tokens", "512"},
                 {"kv-dtype", "f32"}, {"trace", ""}, {"linear", "linear.dense"},
                 {"linear-options", "{}"}, {"set", ""}});
  f.print();
  const EngineConfig base = base_config(f);
  const ModelConfig model = model_of(base);

  const bench::WorkloadSpec spec = workload_spec_from_flags(f, model);
  const auto workload = bench::make_workload(spec);

  struct Row {
    std::string mode;
    bench::RunResult r;
  };
  std::vector<Row> rows;
  std::stringstream modes(f.str("modes"));
  for (std::string mode; std::getline(modes, mode, ',');) {
    EngineConfig cfg = base;
    const uint32_t seqs = mode == "one" ? 1u : static_cast<uint32_t>(f.num("max-num-seqs"));
    cfg.scheduler.max_num_seqs = seqs;
    cfg.scheduler.policy = mode == "static" ? "static" : "continuous";
    cfg.scheduler.max_num_batched_tokens = static_cast<uint32_t>(f.num("max-num-batched-tokens"));
    cfg.kv_cache.enable_prefix_caching = false;  // random prompts: nothing to share anyway
    // Room for every running sequence at full length: batching, not KV, is compared.
    cfg.kv_cache.capacity_tokens = seqs * static_cast<uint32_t>(spec.input_len.max + spec.output_len.max + 16);
    cfg.plugins.kv_allocator = "kv.paged";
    // A serving process's cache is touched once, at start: measure serving, not first-touch page faults.
    cfg.kv_cache.prefault = true;
    DType kv = DType::f32;
    if (!parse_dtype(f.str("kv-dtype"), kv))
      throw Error(ErrorCode::invalid_argument, "--kv-dtype: unknown dtype '" + f.str("kv-dtype") + "'");
    cfg.kv_cache.dtype = kv;
    const std::string trace = f.str("trace").empty() ? "" : f.str("trace") + "." + mode + ".json";
    std::fprintf(stderr, "mode %s: max_num_seqs %u, policy %s\n", mode.c_str(), seqs, cfg.scheduler.policy.c_str());
    rows.push_back({mode, run_on_engine(cfg, workload, true, trace)});
  }

  const Row* one = nullptr;
  for (const auto& r : rows) {
    if (r.mode == "one") one = &r;
  }
  std::printf("\n%d requests, prompt %s, output %s tokens, %s\n", spec.num_requests, f.str("input-len").c_str(),
              f.str("output-len").c_str(), f.str("model").empty() ? f.str("preset").c_str() : f.str("model").c_str());
  std::printf("%-12s %12s %10s %12s %12s %10s %8s\n", "mode", "out tok/s", "mean batch", "TTFT p50 ms", "TTFT p99 ms",
              "x one", "errors");
  for (const auto& row : rows) {
    const auto& s = row.r.summary;
    const double x = one && one->r.summary.output_tokens_per_s > 0 ? s.output_tokens_per_s / one->r.summary.output_tokens_per_s : 0;
    std::printf("%-12s %12.1f %10.2f %12.1f %12.1f %10.2f %8zu\n", row.mode.c_str(), s.output_tokens_per_s,
                row.r.mean_batch_seqs, s.ttft_s.p50 * 1e3, s.ttft_s.p99 * 1e3, x, s.num_errors);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_batching: %s\n", e.what());
  return 1;
}
