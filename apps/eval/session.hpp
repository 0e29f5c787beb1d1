// One `llmk eval` run from an engine configuration: opens the model and its
// tokenizer, builds the executor the config names (KV memory and step size
// fitted to the chunking), tokenizes the text, and evaluates it
// (apps/eval/evaluator.hpp). Shared by `llmk eval` and `llmk ab`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "apps/eval/evaluator.hpp"
#include "core/config.hpp"

namespace llmk::eval {

struct EvalSetup {
  std::string text;       // the text itself
  std::string text_name;  // its file, for the saved header and messages
  int32_t ctx = 512;
  int32_t max_chunks = -1;        // -1: every full chunk
  int32_t batch = 512;            // tokens per step
  bool ctx_from_base = false;     // take ctx and chunks from the --kl-base file
  std::string save_logits;        // write every scored row here
  std::string kl_base;            // compare with the run saved here
  std::function<void(const EvalResult&)> on_chunk;
  // --stream N: the first N tokens (0: all) as one sequence through the
  // cache's window (kv_cache.window, sink_tokens; apps/eval/stream.hpp)
  // instead of chunks. -1: chunks.
  int32_t stream = -1;
};

struct EvalReport {
  std::string model;
  std::string config;     // the executor's description line
  int64_t num_text_tokens = 0;
  EvalResult result;
  std::string base_config;  // the base run's description (when compared)
  // --stream runs: the window (0: full attention), sinks, tokens per step,
  // and the most K/V rows the cache held.
  bool stream = false;
  int32_t window = 0, sink_tokens = 0, stream_batch = 0, peak_kv_rows = 0;
};

// The executor's program must have registered its device executors
// (actors/built_executors.hpp) before a non-CPU config. Throws Error naming
// what is wrong (model, text too short, a base file of another run).
EvalReport run_eval(EngineConfig cfg, const EvalSetup& setup);

// Result lines for stdout, and the same as JSON.
std::string format_report(const EvalReport& report);
nlohmann::json report_json(const EvalReport& report);

}  // namespace llmk::eval
