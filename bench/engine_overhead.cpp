// Engine overhead at batch 1: what a decode step costs inside the engine
// beyond the raw forward, against a limit of 5%; and the raw forward's
// weight stream as a fraction of the read bandwidth measured in the same run.
//
//   raw     Executor::execute of one-token decode steps plus an argmax over
//           the logits, back to back on this thread (the forward alone);
//   engine  one greedy request at a time through the five actors; its time
//           per output token is the spacing of its tokens as the scheduler
//           applied them (Timings::token_times_s), first to last.
//
// Both use the same weights, threads, plugins and contexts (prompt P, then
// tokens P..P+D-1), built in this process; rounds alternate raw, engine
// with scheduler.overlap, engine without, so drift on a shared machine hits
// all three alike. Figures are the median over rounds of each round's mean.
//
//   bench_engine_overhead [--preset llama-110m] [--threads 2] [--prompt-tokens 16]
//                         [--decode-tokens 64] [--rounds 5] [--linear linear.dense]
//                         [--linear-options JSON] [--set "key=value;..."]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/executor.hpp"
#include "core/openmp.hpp"
#include "core/plugin_loader.hpp"
#include "engine_bench_common.hpp"
#include "limits.hpp"
#include "steps.hpp"

namespace {

using namespace llmk;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds per decode step of the raw forward: `decode` one-token steps after
// a prefill of `prompt`, each followed by the argmax a greedy sampler does.
double raw_step_s(Executor& executor, const std::vector<int32_t>& prompt, int decode) {
  const auto capacity = static_cast<int32_t>(executor.runtime().num_kv_slots);
  const auto p = static_cast<int32_t>(prompt.size());
  LogitsView logits = executor.execute(bench::contiguous_step(prompt, 0, capacity));
  auto argmax = [&] {
    const float* row = logits.row(0);
    return static_cast<int32_t>(std::max_element(row, row + logits.vocab_size) - row);
  };
  int32_t next = argmax();
  const auto t0 = clock_type::now();
  for (int i = 0; i < decode; ++i) {
    logits = executor.execute(bench::contiguous_step({next}, p + i, capacity));
    next = argmax();
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count() / decode;
}

// Seconds per output token of one greedy request through the engine: the
// spacing of tokens 1..decode (token 0 comes from the prefill).
double engine_step_s(Engine& engine, const std::vector<int32_t>& prompt, int decode, int round) {
  Request r;
  r.id = "overhead-" + std::to_string(round);
  r.prompt_token_ids = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.sampling.max_tokens = decode + 1;
  auto stream = engine.submit(std::move(r));
  Timings timings;
  while (auto ev = stream->next(std::chrono::seconds(600))) {
    if (ev->finished && ev->finish_reason != FinishReason::length)
      throw Error(ErrorCode::internal, "the request ended with " + std::string(to_string(ev->finish_reason)) +
                                           ": " + ev->error);
    if (ev->finished) timings = ev->timings;
    if (ev->request_done) break;
  }
  const std::vector<double>& t = timings.token_times_s;
  if (t.size() != static_cast<size_t>(decode) + 1) throw Error(ErrorCode::internal, "missing token times");
  return (t.back() - t.front()) / decode;
}

}  // namespace

int main(int argc, char** argv) {
  using bench_programs::Flags;
  const Flags f(argc, argv,
                {{"preset", "llama-110m"}, {"model", ""}, {"threads", "2"}, {"prompt-tokens", "16"},
                 {"decode-tokens", "64"}, {"rounds", "5"}, {"linear", "linear.dense"}, {"linear-options", "{}"},
                 {"set", ""}});
  try {
    EngineConfig cfg = bench_programs::base_config(f);
    const int prompt_tokens = f.num("prompt-tokens"), decode = f.num("decode-tokens"), rounds = f.num("rounds");
    cfg.kv_cache.capacity_tokens = static_cast<uint32_t>(std::max(1024, 2 * (prompt_tokens + decode + 1)));
    validate(cfg);
    f.print();

    auto checkpoint = open_model(cfg.model);
    const ModelConfig& mc = checkpoint->config();
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(mc.vocab_size));

    // One OpenMP pool at a time: libgomp throttles every pool's spinning
    // while the pools' threads outnumber the CPUs (core/openmp.hpp). The raw
    // forward runs on this thread and releases its pool before an engine
    // starts; each engine lives for one measurement, and its executor thread's
    // pool ends with it.
    PluginRegistry plugins;
    const auto executor = make_executor(cfg, checkpoint, plugins);
    EngineConfig with = cfg, without = cfg;
    with.scheduler.overlap = true;
    without.scheduler.overlap = false;
    omp_set_num_threads(f.num("threads"));
    auto raw_round = [&](int decode_steps) {
      const double s = raw_step_s(*executor, prompt, decode_steps);
      release_openmp_pool();
      return s;
    };
    auto engine_round = [&](const EngineConfig& c, int decode_steps, int round) {
      Engine engine(c);  // loads its own weights (the load's pool is released by the engine)
      engine_step_s(engine, prompt, 4, -1 - round);  // warm-up: first-touch pages, plugin scratch, the team
      return engine_step_s(engine, prompt, decode_steps, round);
    };

    raw_round(4);  // warm-up
    std::vector<double> raw, eng_overlap, eng_serial;
    for (int r = 0; r < rounds; ++r) {
      raw.push_back(raw_round(decode));
      eng_overlap.push_back(engine_round(with, decode, 2 * r));
      eng_serial.push_back(engine_round(without, decode, 2 * r + 1));
      std::printf("round %d: raw %.3f ms, engine %.3f ms (overlap), %.3f ms (one step in flight)\n", r + 1,
                  raw.back() * 1e3, eng_overlap.back() * 1e3, eng_serial.back() * 1e3);
    }
    const double raw_s = median(raw), overlap_s = median(eng_overlap), serial_s = median(eng_serial);
    const double weight_bytes = bench::decode_weight_bytes(*checkpoint, *executor);
    const double bandwidth = bench::read_bandwidth_gbs(f.num("threads"));
    std::printf("%s (%s), %s %s, prompt %d + %d decode tokens, median of %d rounds\n",
                cfg.model.path.empty() ? cfg.model.preset.c_str() : cfg.model.path.c_str(),
                dtype_name(mc.dtype), executor->describe().c_str(), cfg.plugins.linear.c_str(), prompt_tokens,
                decode, rounds);
    std::printf("raw forward + argmax  %.3f ms/token  (%.1f tok/s): %.1f MB of weights -> %.1f GB/s = %.0f%% of "
                "the measured %.1f GB/s read bandwidth\n",
                raw_s * 1e3, 1.0 / raw_s, weight_bytes / 1e6, weight_bytes / raw_s / 1e9,
                100.0 * weight_bytes / raw_s / 1e9 / bandwidth, bandwidth);
    std::printf("engine, overlap       %.3f ms/token  (%.1f tok/s): overhead %+.1f%%  (limit 5%%: %.2fx of it)\n",
                overlap_s * 1e3, 1.0 / overlap_s, 100.0 * (overlap_s / raw_s - 1.0),
                (overlap_s / raw_s - 1.0) / 0.05);
    std::printf("engine, one in flight %.3f ms/token  (%.1f tok/s): overhead %+.1f%%\n", serial_s * 1e3,
                1.0 / serial_s, 100.0 * (serial_s / raw_s - 1.0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
