#include "apps/bench_options.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>

namespace llmk::app {

void add_bench_options(CLI::App& cmd, BenchFlags& f) {
  cmd.add_option("--num-prompts,-n", f.num_prompts, "requests in the measured run")->capture_default_str();
  cmd.add_option("--input-len", f.input_len, "prompt tokens: N or MIN:MAX (uniform)")->capture_default_str();
  cmd.add_option("--output-len", f.output_len, "output tokens (ignore_eos): N or MIN:MAX")->capture_default_str();
  cmd.add_option("--prompts", f.prompts_file,
                 "JSONL file of {\"prompt\": ...} or {\"prompt_token_ids\": [...]}, optional \"max_tokens\"");
  cmd.add_option("--shared-prefix-len", f.shared_prefix_len, "synthetic prompts share this many leading tokens")
      ->capture_default_str();
  cmd.add_option("--request-rate", f.request_rate, "requests/s (0: all at once)")->capture_default_str();
  cmd.add_option("--arrival", f.arrival, "burst, fixed or poisson (default: poisson with a rate, else burst)");
  cmd.add_option("--seed", f.seed, "seed of prompts, lengths and arrivals")->capture_default_str();
  cmd.add_option("--max-concurrency", f.max_concurrency, "most requests in flight (0: no cap)")->capture_default_str();
  cmd.add_option("--warmup", f.warmup, "warm-up requests run first and left out of the figures")->capture_default_str();
  cmd.add_option("--temperature", f.temperature, "sampling temperature (0: greedy)")->capture_default_str();
  cmd.add_option("--json", f.json_file, "write the results as JSON to this file");
  cmd.add_flag("--no-progress", f.no_progress, "no progress bar");
  cmd.add_option("--timeout", f.timeout_s, "seconds before live requests count as errors")->capture_default_str();
}

bench::WorkloadSpec workload_spec(const BenchFlags& f, int32_t vocab_size, int32_t bos_token_id) {
  bench::WorkloadSpec s;
  s.num_requests = f.num_prompts;
  s.input_len = bench::parse_length_range(f.input_len, "--input-len");
  s.output_len = bench::parse_length_range(f.output_len, "--output-len");
  s.prompts_file = f.prompts_file;
  s.shared_prefix_len = f.shared_prefix_len;
  s.vocab_size = vocab_size;
  s.bos_token_id = bos_token_id;
  s.request_rate = f.request_rate;
  s.arrival = f.arrival.empty() ? (f.request_rate > 0 ? bench::Arrival::poisson : bench::Arrival::burst)
                                : bench::parse_arrival(f.arrival);
  s.seed = f.seed;
  s.temperature = f.temperature;
  return s;
}

std::vector<bench::BenchRequest> warmup_requests(const BenchFlags& f, int32_t vocab_size, int32_t bos_token_id) {
  if (f.warmup <= 0) return {};
  bench::WorkloadSpec s = workload_spec(f, vocab_size, bos_token_id);
  s.num_requests = f.warmup;
  s.seed = f.seed + 0x5eed;
  s.arrival = bench::Arrival::burst;
  s.id_prefix = "warmup-";
  return bench::make_workload(s);
}

bench::RunOptions run_options(const BenchFlags& f) {
  bench::RunOptions o;
  o.max_concurrency = f.max_concurrency;
  o.progress = !f.no_progress;
  o.timeout_s = f.timeout_s;
  return o;
}

std::string describe(const bench::WorkloadSpec& s) {
  std::string d = std::to_string(s.num_requests) + " requests, ";
  if (!s.prompts_file.empty()) {
    d += "prompts from " + s.prompts_file;
  } else {
    d += "input " + std::to_string(s.input_len.min) +
         (s.input_len.max != s.input_len.min ? ":" + std::to_string(s.input_len.max) : "") + " tokens";
    if (s.shared_prefix_len > 0) d += " (shared prefix " + std::to_string(s.shared_prefix_len) + ")";
  }
  d += ", output " + std::to_string(s.output_len.min) +
       (s.output_len.max != s.output_len.min ? ":" + std::to_string(s.output_len.max) : "") + " tokens, arrival " +
       bench::to_string(s.arrival);
  if (s.arrival != bench::Arrival::burst) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", s.request_rate);
    d += std::string(" at ") + rate + " req/s";
  }
  d += ", seed " + std::to_string(s.seed) + (s.temperature == 0 ? ", greedy" : "");
  return d;
}

}  // namespace llmk::app
