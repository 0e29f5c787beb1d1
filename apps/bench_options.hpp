// Workload and run flags shared by `llmk bench` and `llmk ab` (CLI11 stays
// out of this header).
#pragma once

#include <cstdint>
#include <string>

#include "apps/bench/runner.hpp"
#include "apps/bench/workload.hpp"

namespace CLI {
class App;
}

namespace llmk::app {

struct BenchFlags {
  int32_t num_prompts = 64;
  std::string input_len = "128";   // N or MIN:MAX
  std::string output_len = "128";
  std::string prompts_file;
  int32_t shared_prefix_len = 0;
  double request_rate = 0;         // 0: all at once
  std::string arrival;             // burst | fixed | poisson ("" = poisson when a rate is given)
  uint64_t seed = 0;
  int32_t max_concurrency = 0;
  int32_t warmup = 0;
  float temperature = 0;
  std::string json_file;
  bool no_progress = false;
  double timeout_s = 3600;
};

void add_bench_options(CLI::App& cmd, BenchFlags& flags);

// The workload for a model of `vocab_size` tokens whose prompts start with
// `bos_token_id` (< 0: none).
bench::WorkloadSpec workload_spec(const BenchFlags& flags, int32_t vocab_size, int32_t bos_token_id);
// Warm-up requests: the same shape as the workload, different tokens.
std::vector<bench::BenchRequest> warmup_requests(const BenchFlags& flags, int32_t vocab_size, int32_t bos_token_id);
bench::RunOptions run_options(const BenchFlags& flags);
std::string describe(const bench::WorkloadSpec& spec);

}  // namespace llmk::app
