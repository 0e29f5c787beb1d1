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
// Both use the same checkpoint, threads, plugins and contexts (prompt P,
// then tokens P..P+D-1), built in this process; rounds alternate raw, engine
// with scheduler.overlap, engine without, so drift on a shared machine hits
// all three alike. Each measurement packs its own weights (the raw forward's
// executor, like each engine, lives for one round), so where the weights
// land in memory varies alike too. Figures are the median over rounds of
// each round's mean; the overheads are also given as the median of each
// round's own ratio, and from each round's median step (a step stretched by
// another process taking a core weighs on a mean, not on a median: on a
// shared 2-core VM that is the steadier figure).
//
// The raw forward's argmax is the Sampler's greedy routine (greedy_token),
// the one the engine's executor runs for a greedy step.
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
#include "core/sampler.hpp"
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

// A measurement's seconds per decode step: the mean, and the median step.
struct StepTime {
  double mean_s = 0.0;
  double median_s = 0.0;
};

StepTime step_time(const std::vector<double>& steps) {
  double sum = 0.0;
  for (double s : steps) sum += s;
  return {sum / static_cast<double>(steps.size()), median(steps)};
}

// The raw forward: `decode` one-token steps after a prefill of `prompt`,
// each followed by the argmax a greedy sampler does.
StepTime raw_step_s(Executor& executor, const std::vector<int32_t>& prompt, int decode) {
  const auto capacity = static_cast<int32_t>(executor.runtime().num_kv_slots);
  const auto p = static_cast<int32_t>(prompt.size());
  LogitsView logits = executor.execute(bench::contiguous_step(prompt, 0, capacity));
  auto argmax = [&] { return greedy_token(logits.row(0), logits.vocab_size); };
  int32_t next = argmax();
  std::vector<double> steps;
  auto t0 = clock_type::now();
  for (int i = 0; i < decode; ++i) {
    logits = executor.execute(bench::contiguous_step({next}, p + i, capacity));
    next = argmax();
    const auto t1 = clock_type::now();
    steps.push_back(std::chrono::duration<double>(t1 - t0).count());
    t0 = t1;
  }
  return step_time(steps);
}

// Where an engine's decode step goes, from its trace: the forward (the
// executor's execute span) and the time from one forward's end to the next
// one's start (sampling, the actors' messages, the threads' wake-ups).
struct StepSplit {
  double forward_s = 0.0, between_s = 0.0;  // medians over the measured steps
};

StepSplit split_steps(const std::vector<TraceSpan>& spans, int decode) {
  std::vector<const TraceSpan*> steps;  // one-token forwards, in order
  for (const TraceSpan& s : spans)
    if (s.name == "execute" && s.count == 1) steps.push_back(&s);
  std::sort(steps.begin(), steps.end(), [](const TraceSpan* a, const TraceSpan* b) { return a->start_s < b->start_s; });
  // The last request's steps.
  if (steps.size() > static_cast<size_t>(decode)) steps.erase(steps.begin(), steps.end() - decode);
  std::vector<double> forward, between;
  for (size_t i = 0; i < steps.size(); ++i) {
    forward.push_back(steps[i]->end_s - steps[i]->start_s);
    if (i + 1 < steps.size()) between.push_back(steps[i + 1]->start_s - steps[i]->end_s);
  }
  return {forward.empty() ? 0.0 : median(forward), between.empty() ? 0.0 : median(between)};
}

// Seconds per output token of one greedy request through the engine: the
// spacing of tokens 1..decode (token 0 comes from the prefill).
StepTime engine_step_s(Engine& engine, const std::vector<int32_t>& prompt, int decode, int round) {
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
  std::vector<double> steps;
  for (size_t i = 1; i < t.size(); ++i) steps.push_back(t[i] - t[i - 1]);
  return step_time(steps);
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
    if (prompt_tokens < 1 || decode < 1 || rounds < 1)
      throw Error(ErrorCode::invalid_argument, "--prompt-tokens, --decode-tokens and --rounds must be >= 1, got " +
                                                   std::to_string(prompt_tokens) + ", " + std::to_string(decode) +
                                                   " and " + std::to_string(rounds));
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
    EngineConfig with = cfg, without = cfg;
    with.scheduler.overlap = true;
    without.scheduler.overlap = false;
    omp_set_num_threads(f.num("threads"));
    auto raw_round = [&](int decode_steps) {
      StepTime s;
      {
        const auto executor = make_executor(cfg, checkpoint, plugins);  // its own weights, as each engine's
        raw_step_s(*executor, prompt, 4);  // warm-up: first-touch pages, plugin scratch, the team
        s = raw_step_s(*executor, prompt, decode_steps);
      }
      release_openmp_pool();
      return s;
    };
    auto engine_round = [&](const EngineConfig& c, int decode_steps, int round, StepSplit& split) {
      EngineOptions options;
      options.record_trace = true;  // a few spans a step, for the split below
      Engine engine(c, options);  // loads its own weights (the load's pool is released by the engine)
      engine_step_s(engine, prompt, 4, -1 - round);  // warm-up: first-touch pages, plugin scratch, the team
      const StepTime s = engine_step_s(engine, prompt, decode_steps, round);
      split = split_steps(engine.trace_spans(), decode_steps);
      return s;
    };

    std::vector<double> raw, eng_overlap, eng_serial, ratio_overlap, ratio_serial, forward_overlap, between_overlap;
    std::vector<double> raw_median, overlap_median, serial_median, median_ratio_overlap, median_ratio_serial;
    for (int r = 0; r < rounds; ++r) {
      const StepTime raw_time = raw_round(decode);
      StepSplit split_overlap, split_serial;
      const StepTime overlap_time = engine_round(with, decode, 2 * r, split_overlap);
      const StepTime serial_time = engine_round(without, decode, 2 * r + 1, split_serial);
      raw.push_back(raw_time.mean_s);
      eng_overlap.push_back(overlap_time.mean_s);
      eng_serial.push_back(serial_time.mean_s);
      raw_median.push_back(raw_time.median_s);
      overlap_median.push_back(overlap_time.median_s);
      serial_median.push_back(serial_time.median_s);
      forward_overlap.push_back(split_overlap.forward_s);
      between_overlap.push_back(split_overlap.between_s);
      ratio_overlap.push_back(eng_overlap.back() / raw.back());
      ratio_serial.push_back(eng_serial.back() / raw.back());
      median_ratio_overlap.push_back(overlap_median.back() / raw_median.back());
      median_ratio_serial.push_back(serial_median.back() / raw_median.back());
      std::printf("round %d: raw %.3f ms (median step %.3f), engine %.3f ms (%.3f) (overlap: forward %.3f ms + "
                  "%.0f us between forwards), %.3f ms (%.3f) (one step in flight)\n",
                  r + 1, raw.back() * 1e3, raw_median.back() * 1e3, eng_overlap.back() * 1e3,
                  overlap_median.back() * 1e3, split_overlap.forward_s * 1e3, split_overlap.between_s * 1e6,
                  eng_serial.back() * 1e3, serial_median.back() * 1e3);
    }
    const double raw_s = median(raw), overlap_s = median(eng_overlap), serial_s = median(eng_serial);
    std::string describe;
    const double weight_bytes = [&] {
      const auto executor = make_executor(cfg, checkpoint, plugins);
      describe = executor->describe();
      return bench::decode_weight_bytes(*checkpoint, *executor);
    }();
    release_openmp_pool();
    const double bandwidth = bench::read_bandwidth_gbs(f.num("threads"));
    std::printf("%s (%s), %s %s, prompt %d + %d decode tokens, median of %d rounds\n",
                cfg.model.path.empty() ? cfg.model.preset.c_str() : cfg.model.path.c_str(),
                dtype_name(mc.dtype), describe.c_str(), cfg.plugins.linear.c_str(), prompt_tokens,
                decode, rounds);
    std::printf("raw forward + argmax  %.3f ms/token  (%.1f tok/s): %.1f MB of weights -> %.1f GB/s = %.0f%% of "
                "the measured %.1f GB/s read bandwidth\n",
                raw_s * 1e3, 1.0 / raw_s, weight_bytes / 1e6, weight_bytes / raw_s / 1e9,
                100.0 * weight_bytes / raw_s / 1e9 / bandwidth, bandwidth);
    const double paired_overlap = median(ratio_overlap) - 1.0, paired_serial = median(ratio_serial) - 1.0;
    std::printf("engine, overlap       %.3f ms/token  (%.1f tok/s): overhead %+.1f%%, per round %+.1f%%  (limit 5%%: "
                "%.2fx of it)\n",
                overlap_s * 1e3, 1.0 / overlap_s, 100.0 * (overlap_s / raw_s - 1.0), 100.0 * paired_overlap,
                paired_overlap / 0.05);
    std::printf("  inside it (traced): forward %.3f ms (%+.1f%% of the raw forward + argmax), %.0f us between "
                "forwards (%.1f%% of the step)\n",
                median(forward_overlap) * 1e3, 100.0 * (median(forward_overlap) / raw_s - 1.0),
                median(between_overlap) * 1e6,
                100.0 * median(between_overlap) / (median(forward_overlap) + median(between_overlap)));
    std::printf("engine, one in flight %.3f ms/token  (%.1f tok/s): overhead %+.1f%%, per round %+.1f%%\n",
                serial_s * 1e3, 1.0 / serial_s, 100.0 * (serial_s / raw_s - 1.0), 100.0 * paired_serial);
    const double median_overlap = median(median_ratio_overlap) - 1.0;
    std::printf("median steps          raw %.3f ms, engine overlap %.3f ms: overhead %+.1f%% (limit 5%%: %.2fx of "
                "it), one in flight %.3f ms: %+.1f%%  (per round, median over rounds)\n",
                median(raw_median) * 1e3, median(overlap_median) * 1e3, 100.0 * median_overlap,
                median_overlap / 0.05, median(serial_median) * 1e3, 100.0 * (median(median_ratio_serial) - 1.0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
