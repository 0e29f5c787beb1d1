// KV allocators under one KV byte budget, and prefix caching.
//
// Part 1: one mixed-length workload (prompts 16-512, outputs 16-512 tokens,
// all at once) on kv.contiguous, kv.paged and kv.vm with the same
// kv_cache.capacity_bytes: peak concurrency, output tokens/s, waste
// (reserved but unused slots, time-averaged), preemptions, relocations.
// Part 2: requests sharing a system prompt, kv.paged with prefix caching
// on vs off: prefill tokens computed and TTFT.
//
//   bench_kv_allocators [--preset llama-110m] [--model DIR] [--kv-bytes 256MiB]
//       [--num-requests 64] [--input-len 16:512] [--output-len 16:512]
//       [--prefix-requests 64] [--prefix-len 448] [--prefix-input-len 512]
//       [--prefix-output-len 16] [--threads 0] [--allocators kv.contiguous,kv.paged,kv.vm]
//       [--max-seq-len 0 (= longest prompt + longest output)]
#include <cstdio>
#include <sstream>

#include "bench/engine_bench_common.hpp"
#include "core/checkpoint.hpp"
#include "core/model_runtime.hpp"

using namespace llmk;
using namespace llmk::bench_programs;

namespace {

// Time-averaged share of reserved KV slots that hold no live token.
double waste_fraction(const bench::RunResult& r) {
  double reserved = 0, unused = 0;
  for (const auto& s : r.kv_samples) {
    reserved += s.reserved_fraction;
    unused += s.reserved_fraction - s.used_fraction;
  }
  return reserved > 0 ? unused / reserved : 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags f(argc, argv,
                {{"preset", "llama-110m"}, {"model", ""}, {"kv-bytes", "256MiB"}, {"num-requests", "64"},
                 {"input-len", "16:512"}, {"output-len", "16:512"}, {"prefix-requests", "64"}, {"prefix-len", "448"},
                 {"prefix-input-len", "512"}, {"prefix-output-len", "16"}, {"prefix-concurrency", "8"},
                 {"threads", "0"}, {"seed", "0"}, {"max-num-seqs", "64"},
                 {"allocators", "kv.contiguous,kv.paged,kv.vm"}, {"parts", "1,2"}, {"max-seq-len", "0"}});
  f.print();
  EngineConfig base = base_config(f);
  apply_override(base, "kv_cache.capacity_bytes=" + f.str("kv-bytes"));
  base.scheduler.max_num_seqs = static_cast<uint32_t>(f.num("max-num-seqs"));
  const ModelConfig model = model_of(base);
  const DType kv_dtype = resolve_kv_dtype(base, model, resolve_load_format(base.model)).dtype;
  const int64_t kv_per_token = model.kv_bytes_per_token(kv_dtype, static_cast<int32_t>(base.kv_cache.group_size));
  std::printf("KV budget %s = %llu token slots of %lld bytes\n", f.str("kv-bytes").c_str(),
              static_cast<unsigned long long>(base.kv_cache.capacity_bytes / static_cast<uint64_t>(kv_per_token)),
              static_cast<long long>(kv_per_token));

  if (f.str("parts").find('1') != std::string::npos) {
    const bench::WorkloadSpec spec = workload_spec_from_flags(f, model);
    const auto workload = bench::make_workload(spec);
    std::vector<std::pair<std::string, bench::RunResult>> rows;
    std::stringstream names(f.str("allocators"));
    for (std::string name; std::getline(names, name, ',');) {
      EngineConfig cfg = base;
      cfg.plugins.kv_allocator = name;
      cfg.kv_cache.enable_prefix_caching = false;
      // The context limit is the workload's longest sequence (kv.contiguous
      // reserves it for every sequence), unless given.
      cfg.kv_cache.max_seq_len = f.num("max-seq-len") > 0 ? static_cast<uint32_t>(f.num("max-seq-len"))
                                                          : static_cast<uint32_t>(spec.input_len.max + spec.output_len.max);
      std::fprintf(stderr, "part 1: %s\n", name.c_str());
      rows.emplace_back(name, run_on_engine(cfg, workload));
    }
    std::printf("\npart 1: %d requests, prompts %s, outputs %s tokens, all at once\n", spec.num_requests,
                f.str("input-len").c_str(), f.str("output-len").c_str());
    std::printf("%-14s %9s %11s %8s %12s %10s %12s %7s\n", "allocator", "peak seqs", "out tok/s", "waste %",
                "KV peak %", "preempts", "relocations", "errors");
    for (const auto& [name, r] : rows) {
      std::printf("%-14s %9llu %11.1f %8.1f %12.1f %10llu %12llu %7zu\n", name.c_str(),
                  static_cast<unsigned long long>(r.peak_running), r.summary.output_tokens_per_s,
                  waste_fraction(r) * 100, r.kv_peak_reserved_fraction * 100,
                  static_cast<unsigned long long>(r.num_preemptions), static_cast<unsigned long long>(r.num_relocations),
                  r.summary.num_errors);
    }
  }

  if (f.str("parts").find('2') != std::string::npos) {
    bench::WorkloadSpec spec;
    spec.num_requests = f.num("prefix-requests");
    spec.input_len = bench::parse_length_range(f.str("prefix-input-len"), "--prefix-input-len");
    spec.output_len = bench::parse_length_range(f.str("prefix-output-len"), "--prefix-output-len");
    spec.shared_prefix_len = f.num("prefix-len");
    spec.vocab_size = model.vocab_size;
    spec.bos_token_id = model.bos_token_id;
    spec.seed = static_cast<uint64_t>(f.num("seed"));
    const auto workload = bench::make_workload(spec);
    std::printf("\npart 2: %d requests of %s tokens sharing a %d-token prefix, %s output tokens, %d at a time, kv.paged\n",
                spec.num_requests, f.str("prefix-input-len").c_str(), spec.shared_prefix_len,
                f.str("prefix-output-len").c_str(), f.num("prefix-concurrency"));
    std::printf("%-16s %15s %12s %12s %11s %7s\n", "prefix caching", "prefill tokens", "TTFT p50 ms", "TTFT p99 ms",
                "out tok/s", "errors");
    for (bool on : {false, true}) {
      EngineConfig cfg = base;
      cfg.plugins.kv_allocator = "kv.paged";
      cfg.kv_cache.enable_prefix_caching = on;
      cfg.kv_cache.max_seq_len = static_cast<uint32_t>(spec.input_len.max + spec.output_len.max);
      validate(cfg);
      Engine engine(cfg);
      auto target = bench::make_engine_target(engine);
      bench::RunOptions o;
      o.progress = true;
      o.max_concurrency = f.num("prefix-concurrency");
      std::fprintf(stderr, "part 2: prefix caching %s\n", on ? "on" : "off");
      const bench::RunResult r = bench::run_workload(*target, workload, o);
      std::printf("%-16s %15llu %12.1f %12.1f %11.1f %7zu\n", on ? "on" : "off",
                  static_cast<unsigned long long>(r.num_prefill_tokens), r.summary.ttft_s.p50 * 1e3,
                  r.summary.ttft_s.p99 * 1e3, r.summary.output_tokens_per_s, r.summary.num_errors);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_kv_allocators: %s\n", e.what());
  return 1;
}
