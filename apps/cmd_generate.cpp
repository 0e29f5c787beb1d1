// llmk generate: one prompt streamed to stdout, or a JSONL batch of requests
// run concurrently (--batch-file), both through the Engine. stdout carries
// only generated text (or the JSON results); logs go to stderr.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

#include "actors/engine.hpp"
#include "apps/batch_file.hpp"
#include "apps/command.hpp"
#include "apps/model_options.hpp"
#include "apps/parallel_launch.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"

namespace llmk::app {
namespace {

struct GenerateOptions {
  ModelOptions model;
  std::string prompt;
  int32_t max_tokens = 128;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  int64_t seed = -1;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int32_t beam_width = 0;
  float length_penalty = 1.0f;
  std::string early_stopping = "false";
  std::string batch_file;
  std::string trace_file;
};

Request default_request(const GenerateOptions& o) {
  Request r;
  r.sampling.temperature = o.temperature;
  r.sampling.top_k = o.top_k;
  r.sampling.top_p = o.top_p;
  r.sampling.max_tokens = o.max_tokens;
  r.sampling.ignore_eos = o.ignore_eos;
  r.sampling.stop = o.stop;
  r.sampling.beam_width = o.beam_width;
  r.sampling.length_penalty = o.length_penalty;
  r.sampling.early_stopping = o.early_stopping == "true"    ? EarlyStopping::immediate
                              : o.early_stopping == "never" ? EarlyStopping::never
                                                            : EarlyStopping::heuristic;
  // Beam search reads raw log-probabilities; the default temperature stands.
  if (o.seed >= 0) r.sampling.seed = static_cast<uint64_t>(o.seed);
  return r;
}

int run_single(Engine& engine, const GenerateOptions& o) {
  Request r = default_request(o);
  r.id = "generate";
  r.prompt = o.prompt;
  if (o.prompt.empty()) r.prompt_token_ids = {engine.model_config().bos_token_id};  // start from BOS
  auto stream = engine.submit(std::move(r));
  std::optional<RequestEvent> last;
  while (auto ev = stream->next(std::chrono::hours(24))) {
    if (ev->index != 0) continue;  // one text: a beam search's best hypothesis is sample 0
    std::fwrite(ev->text_delta.data(), 1, ev->text_delta.size(), stdout);
    std::fflush(stdout);
    if (ev->request_done) last = std::move(ev);
  }
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!last) return 1;
  if (last->finish_reason == FinishReason::error) {
    spdlog::error("generate: {}", last->error);
    return 1;
  }
  const Timings& t = last->timings;
  const int32_t n = last->usage.completion_tokens;
  double decode_s = t.e2e_s - t.time_to_first_token_s;
  spdlog::info("prompt {} tokens, time to first token {:.3f} s; generated {} tokens, decode {:.1f} tok/s; finish: {}",
               last->usage.prompt_tokens, t.time_to_first_token_s, n,
               n > 1 && decode_s > 0 ? (n - 1) / decode_s : 0.0, to_string(last->finish_reason));
  if (last->beam)
    spdlog::info("beam search: cumulative log-probability {:.6f}, score {:.6f}", last->beam->cumulative_logprob,
                 last->beam->score);
  return 0;
}

int run_batch(Engine& engine, const GenerateOptions& o) {
  std::ifstream in(o.batch_file);
  if (!in) throw Error(ErrorCode::not_found, "cannot read batch file '" + o.batch_file + "'");
  const Request defaults = default_request(o);
  std::vector<std::unique_ptr<BatchResult>> results;
  std::mutex mutex;
  std::condition_variable done;
  size_t num_pending = 0;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto result = std::make_unique<BatchResult>();
    BatchResult* target = result.get();
    results.push_back(std::move(result));
    Request request;
    try {
      request = parse_batch_line(line, line_number, defaults);
    } catch (const std::exception& e) {
      // Keep the line's own id when it has a readable one.
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      bool has_id = j.is_object() && j.contains("id") && j["id"].is_string();
      target->id = has_id ? j["id"].get<std::string>() : "line-" + std::to_string(line_number);
      target->error = "line " + std::to_string(line_number) + ": " + e.what();
      continue;
    }
    target->id = request.id;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++num_pending;
    }
    engine.submit(std::move(request), [&, target](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mutex);
      target->add(ev);
      if (ev.request_done) {
        --num_pending;
        done.notify_all();
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return num_pending == 0; });
  }
  for (const auto& r : results) std::cout << r->to_json().dump() << '\n';
  std::cout.flush();
  EngineStats s = engine.stats();
  spdlog::info("batch: {} requests, {} generated tokens in {} steps, mean batch {:.1f} sequences, {} preemptions",
               results.size(), s.num_generated_tokens, s.num_steps, s.mean_batch_seqs, s.num_preemptions);
  return 0;
}

int run_generate(const GenerateOptions& o) {
  const EngineConfig cfg = build_engine_config(o.model);
  if (const std::optional<int> code = serve_steps_unless_rank0(cfg)) return *code;
  EngineOptions options;
  options.trace_file = o.trace_file;
  Engine engine(cfg, options);
  return o.batch_file.empty() ? run_single(engine, o) : run_batch(engine, o);
}

const CommandRegistration registration(
    "generate", "Generate text through the engine: one prompt streamed, or a JSONL batch", [](CLI::App& cmd) {
      auto o = std::make_shared<GenerateOptions>();
      add_model_options(cmd, o->model);
      cmd.add_option("--prompt", o->prompt, "prompt text (empty: start from BOS)");
      cmd.add_option("--max-tokens", o->max_tokens, "most tokens to generate")->capture_default_str();
      cmd.add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
      cmd.add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
      cmd.add_option("--top-p", o->top_p, "1 = off")->capture_default_str();
      cmd.add_option("--seed", o->seed, "sampling seed (-1: random)")->capture_default_str();
      cmd.add_flag("--ignore-eos", o->ignore_eos, "keep generating past EOS");
      cmd.add_option("--stop", o->stop, "stop string (repeatable); not part of the output");
      cmd.add_option("--beam-width", o->beam_width,
                     "beam search of this width (0: off); prints the best hypothesis (docs/beam_search.md)")
          ->capture_default_str();
      cmd.add_option("--length-penalty", o->length_penalty, "beam search: score = logprob / length^penalty")
          ->capture_default_str();
      cmd.add_option("--early-stopping", o->early_stopping, "beam search: false, true or never")
          ->check(CLI::IsMember({"false", "true", "never"}))
          ->capture_default_str();
      cmd.add_option("--batch-file", o->batch_file,
                     "JSONL requests {id, prompt, max_tokens, temperature, top_p, seed, stop, n}, run concurrently; "
                     "one JSON result per line on stdout (flags above are the defaults)");
      cmd.add_option("--trace", o->trace_file, "write a Chrome trace (JSON) of the pipeline's per-step spans");
      return [o] { return run_generate(*o); };
    });

}  // namespace
}  // namespace llmk::app
