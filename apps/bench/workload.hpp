// Benchmark workloads: which prompts, how many output tokens, and when each
// request arrives. The same spec and seed give the same workload, byte for
// byte, so two configurations can be compared on identical traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/request.hpp"

namespace llmk::bench {

// An inclusive range of lengths; "128" or "16:512" on the command line.
struct LengthRange {
  int32_t min = 128;
  int32_t max = 128;
};
LengthRange parse_length_range(const std::string& text, const std::string& option);

enum class Arrival { burst, fixed, poisson };
Arrival parse_arrival(const std::string& text);
const char* to_string(Arrival a);

struct WorkloadSpec {
  int32_t num_requests = 64;
  LengthRange input_len{128, 128};
  LengthRange output_len{128, 128};
  std::string prompts_file;      // JSONL: {"prompt": str | "prompt_token_ids": [int], "max_tokens": int?}
  int32_t vocab_size = 32000;    // synthetic token ids are drawn from [first_token_id, vocab_size)
  int32_t first_token_id = 3;    // skips unk/bos/eos of Llama vocabularies
  int32_t bos_token_id = 1;      // < 0: synthetic prompts start without BOS
  int32_t shared_prefix_len = 0; // leading tokens common to every synthetic prompt (system prompt)
  Arrival arrival = Arrival::burst;
  double request_rate = 0;       // requests/s for fixed and poisson; 0 with burst
  uint64_t seed = 0;
  float temperature = 0;         // 0: greedy, comparable across configurations
  bool ignore_eos = true;        // output lengths exact
  std::string id_prefix = "bench-";
};

struct BenchRequest {
  Request request;
  double arrival_s = 0;          // offset from the start of the run
  int32_t num_prompt_tokens = 0; // known for token-id prompts; 0 for text
};

// Throws llmk::Error naming the file and line for a bad JSONL file.
std::vector<BenchRequest> make_workload(const WorkloadSpec& spec);

// Arrival offsets (seconds) of n requests: all at 0 (burst), every 1/rate
// (fixed), or exponential gaps of mean 1/rate (poisson, seeded).
std::vector<double> make_arrivals(int32_t n, Arrival arrival, double rate, uint64_t seed);

}  // namespace llmk::bench
