// CPU forward-pass throughput on dummy weights, each figure next to a limit
// measured in the same run:
//   decode (batch 1): tokens/s, and weight bytes streamed per second against
//     the machine's read bandwidth (a multi-threaded sum over 1 GiB): the
//     best run against the best probe, and each run against a probe taken
//     just before it;
//   prefill (one prompt): tokens/s, and GFLOP/s against a large oneDNN
//     matmul in the weights' dtype (f32, or bf16 x bf16 -> f32).
//
//   bench_forward_cpu [--preset llama-110m] [--threads N] [--prompt-tokens 128]
//                     [--decode-tokens 64] [--repeats 3] [--linear linear.dense]
//                     [--linear-options JSON] [--kv-dtype f32|f16|i8] [--per-run 1] [--ops 1]
//   --per-run 1 also prints each decode run's probe, time and weight stream;
//   --ops 1 where a decode token's time goes (medians over every decode
//   token of every run, per kind of operation: core/forward_timings.hpp).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/executor.hpp"
#include "core/plugin_loader.hpp"
#include "limits.hpp"
#include "steps.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 reports the intrinsics' internal undefined registers as uninitialized (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}


// Peak of a large matmul [m, k] x [k, n] in oneDNN, best of 10 (GFLOP/s).
double matmul_peak_gflops(bool bf16, int threads) {
  using dnnl::memory;
  omp_set_num_threads(threads);
  const memory::dim m = 512, k = 2048, n = 2048;
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const memory::desc a_md({m, k}, dt, memory::format_tag::ab), b_md({k, n}, dt, memory::format_tag::any),
      c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  memory a(a_md, eng), b(pd.weights_desc(), eng), c(c_md, eng);
  std::memset(a.get_data_handle(), 0, a_md.get_size());
  std::memset(b.get_data_handle(), 0, pd.weights_desc().get_size());
  dnnl::matmul mm(pd);
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = clock_type::now();
    mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
    best = std::max(best, 2.0 * m * k * n / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

static int run(int argc, char** argv) {
  std::string preset = "llama-110m", linear = "linear.dense", linear_options = "{}", kv_dtype = "f32";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int prompt_tokens = 128, decode_tokens = 64, repeats = 3;
  bool per_run = false, ops = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--preset") preset = v;
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--prompt-tokens") prompt_tokens = std::stoi(v);
    else if (a == "--decode-tokens") decode_tokens = std::stoi(v);
    else if (a == "--repeats") repeats = std::stoi(v);
    else if (a == "--linear") linear = v;
    else if (a == "--linear-options") linear_options = v;
    else if (a == "--kv-dtype") kv_dtype = v;
    else if (a == "--per-run") per_run = v != "0";
    else if (a == "--ops") ops = v != "0";
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (repeats < 1 || prompt_tokens < 1 || decode_tokens < 0 || threads < 1) {
    std::fprintf(stderr, "bench_forward_cpu: --repeats, --prompt-tokens and --threads take 1 or more, "
                         "--decode-tokens 0 or more\n");
    return 2;
  }
  llmk::EngineConfig cfg;
  llmk::DType kv = llmk::DType::f32;
  if (!llmk::parse_dtype(kv_dtype, kv) || (kv != llmk::DType::f32 && kv != llmk::DType::f16 && kv != llmk::DType::i8)) {
    std::fprintf(stderr, "bench_forward_cpu: --kv-dtype takes f32, f16 or i8, not '%s'\n", kv_dtype.c_str());
    return 2;
  }
  cfg.kv_cache.dtype = kv;
  cfg.model.load_format = "dummy";
  cfg.model.preset = preset;
  cfg.executor.num_threads = threads;
  cfg.kv_cache.capacity_tokens = static_cast<uint32_t>(prompt_tokens + decode_tokens + 1);
  cfg.scheduler.max_num_batched_tokens = static_cast<uint32_t>(prompt_tokens);
  cfg.plugins.linear = linear;
  cfg.plugins.linear_options = linear_options;
  auto checkpoint = llmk::open_model(cfg.model);
  const llmk::ModelConfig& mc = checkpoint->config();
  llmk::PluginRegistry plugins;
  const auto executor = llmk::make_executor(cfg, checkpoint, plugins);
  const int32_t capacity = static_cast<int32_t>(executor->runtime().num_kv_slots);

  const llmk::bench::ReadBandwidthProbe probe;
  const double bandwidth = probe.measure(threads, 5);
  bool bf16_gemm = mc.dtype == llmk::DType::bf16 || linear_options.find("bf16") != std::string::npos;
  double peak = 0.0;
  try {
    peak = matmul_peak_gflops(bf16_gemm, threads);
  } catch (const dnnl::error&) {  // no BF16 matmul in oneDNN on this CPU (AVX2 only): the F32 peak is the limit
    bf16_gemm = false;
    peak = matmul_peak_gflops(false, threads);
  }

  std::mt19937 rng(1);
  std::vector<int32_t> prompt(prompt_tokens);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % mc.vocab_size);
  llmk::LogitsView logits;  // host rows: the CPU executor's view
  auto argmax = [&] {
    const float* row = logits.row(0);
    return static_cast<int32_t>(std::max_element(row, row + logits.vocab_size) - row);
  };
  omp_set_num_threads(threads);

  // Prefill: whole prompt in one step, logits for its last token.
  double prefill_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    logits = executor->execute(llmk::bench::contiguous_step(prompt, 0, capacity));
    prefill_s = std::min(prefill_s, seconds_since(t0));
  }
  // Decode: one token per step after the prompt, each run right after a
  // bandwidth probe of its own, so that each run's weight stream is compared
  // with what the machine gave at that moment.
  const double weight_bytes = llmk::bench::decode_weight_bytes(*checkpoint, *executor);
  double decode_s = 1e30;
  std::vector<double> run_fractions;
  // --ops: each decode token's operation times (the timings are read and
  // cleared between tokens, outside the timed forward).
  llmk::ForwardTimings timings;
  std::vector<llmk::ForwardTimings> token_ops;
  const bool timing = ops && decode_tokens > 0 && executor->time_forwards(&timings);
  if (timing) token_ops.reserve(static_cast<size_t>(repeats) * decode_tokens);
  for (int r = 0; r < repeats && decode_tokens > 0; ++r) {
    const double run_bandwidth = probe.measure(threads, 2);
    int32_t next = argmax();
    const auto t0 = clock_type::now();
    for (int i = 0; i < decode_tokens; ++i) {
      logits = executor->execute(llmk::bench::contiguous_step({next}, prompt_tokens + i, capacity));
      next = argmax();
      if (timing) {
        token_ops.push_back(timings);
        timings.clear();
      }
    }
    const double run_s = seconds_since(t0) / decode_tokens;
    decode_s = std::min(decode_s, run_s);
    run_fractions.push_back(weight_bytes / run_s / 1e9 / run_bandwidth);
    if (per_run)
      std::printf("run %d: probe %.1f GB/s, %.3f ms/token, weights %.1f GB/s (%.0f%%)\n", r + 1, run_bandwidth,
                  run_s * 1e3, weight_bytes / run_s / 1e9, 100.0 * run_fractions.back());
  }

  const double h = mc.hidden_size, inter = mc.intermediate_size, layers = mc.num_layers;
  const double q_dim = double(mc.num_heads) * mc.head_dim, kv_dim = double(mc.num_kv_heads) * mc.head_dim;
  // Prefill FLOPs: the linears of every layer for every token (the last
  // layer's o_proj/MLP and lm_head only for the last token), plus attention.
  const double per_token_layer = 2.0 * h * (q_dim + 2 * kv_dim) + 2.0 * q_dim * h + 2.0 * 3 * h * inter;
  const double p = prompt_tokens;
  const double flops = p * layers * per_token_layer - (p - 1) * (2.0 * q_dim * h + 6.0 * h * inter) +
                       2.0 * h * mc.vocab_size + layers * 2.0 * 2.0 * q_dim * p * (p + 1) / 2.0;

  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("preset %s (%s weights, %.1f M params), %d threads, %s %s, %s KV cache, OMP_WAIT_POLICY=%s\n",
              preset.c_str(), llmk::dtype_name(mc.dtype), mc.num_parameters() / 1e6, threads, linear.c_str(),
              linear_options.c_str(), kv_dtype.c_str(), wait_policy ? wait_policy : "(default)");
  std::printf("limits: read bandwidth %.1f GB/s; %s matmul peak %.1f GFLOP/s\n", bandwidth,
              bf16_gemm ? "bf16" : "f32", peak);
  if (run_fractions.empty()) {
    std::printf("decode  batch 1: not measured (--decode-tokens 0)\n");
  } else {
    std::printf("decode  batch 1: %.1f tok/s  (%.2f ms/token, %.1f MB weights/token -> %.1f GB/s = %.0f%% of bandwidth)\n",
                1.0 / decode_s, decode_s * 1e3, weight_bytes / 1e6, weight_bytes / decode_s / 1e9,
                100.0 * weight_bytes / decode_s / 1e9 / bandwidth);
    std::sort(run_fractions.begin(), run_fractions.end());
    std::printf("        each run against a probe just before it:");
    for (double f : run_fractions) std::printf(" %.0f%%", 100.0 * f);
    std::printf(" (median %.0f%%)\n", 100.0 * run_fractions[run_fractions.size() / 2]);
  }
  if (ops && !timing) std::printf("operations: not timed (no decode tokens, or the executor cannot time them)\n");
  if (timing) {
    executor->time_forwards(nullptr);
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> totals;
    for (const auto& t : token_ops) totals.push_back(t.total());
    std::printf("        a decode token's operations (medians over %zu tokens, us):", token_ops.size());
    for (size_t op = 0; op < llmk::ForwardTimings::kOps; ++op) {
      std::vector<double> v;
      for (const auto& t : token_ops) v.push_back(t.seconds[op]);
      std::printf(" %s %.1f", llmk::ForwardTimings::name(static_cast<llmk::ForwardOp>(op)), median(v) * 1e6);
    }
    std::printf("; forward %.1f\n", median(totals) * 1e6);
  }
  std::printf("prefill %d tokens: %.1f tok/s  (%.1f ms, %.1f GFLOP/s = %.0f%% of matmul peak)\n", prompt_tokens,
              p / prefill_s, prefill_s * 1e3, flops / prefill_s / 1e9, 100.0 * flops / prefill_s / 1e9 / peak);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a bad option value, an unknown plugin, a plugin refusing its options
    std::fprintf(stderr, "bench_forward_cpu: %s\n", e.what());
    return 1;
  }
}
