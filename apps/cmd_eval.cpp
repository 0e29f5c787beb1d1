// llmk eval: perplexity of a model configuration over a text, chunked as
// llama.cpp's llama-perplexity does it (apps/eval/perplexity.hpp), and its
// KL divergence and top-1 agreement against another configuration's saved
// run (--save-logits on one, --kl-base on the other).
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "actors/built_executors.hpp"
#include "apps/command.hpp"
#include "apps/eval/progress.hpp"
#include "apps/eval/session.hpp"
#include "apps/model_options.hpp"
#include "apps/parallel_launch.hpp"
#include "core/error.hpp"

namespace llmk::app {
namespace {

struct EvalOptions {
  ModelOptions model;
  std::string text_file;
  eval::EvalSetup setup;
  bool json = false;
  CLI::Option* ctx_option = nullptr;
  CLI::Option* chunks_option = nullptr;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::invalid_argument, "eval: cannot read --text '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_eval_command(EvalOptions& o) {
  EngineConfig cfg = build_engine_config(o.model);
  if (const std::optional<int> code = serve_steps_unless_rank0(cfg)) return *code;
  eval::EvalSetup setup = o.setup;
  setup.text = read_file(o.text_file);
  setup.text_name = o.text_file;
  // With a base file, its chunking unless the flags name one (then they must agree).
  setup.ctx_from_base = !setup.kl_base.empty() && o.ctx_option->count() == 0 && o.chunks_option->count() == 0;
  auto progress = std::make_shared<eval::Progress>("eval");
  setup.on_chunk = [progress, stream = setup.stream >= 0](const eval::EvalResult& r) {
    char note[64];
    std::snprintf(note, sizeof(note), "ppl %.4f", eval::perplexity(r.nll));
    // A stream reports the positions scored so far of its one sequence.
    if (stream) progress->update(static_cast<int32_t>(r.nll.count), r.plan.ctx - 1, r.seconds, note);
    else progress->update(r.chunks_done, r.plan.num_chunks, r.seconds, note);
  };
  register_built_executors();
  const eval::EvalReport report = eval::run_eval(cfg, setup);
  progress->finish();
  if (o.json) std::printf("%s\n", eval::report_json(report).dump(2).c_str());
  else std::printf("%s", eval::format_report(report).c_str());
  if (!setup.save_logits.empty()) std::fprintf(stderr, "eval: logits saved to %s\n", setup.save_logits.c_str());
  return 0;
}

const CommandRegistration registration{
    "eval", "Perplexity over a text (llama-perplexity's chunking); KL divergence against a saved run",
    [](CLI::App& cmd) {
      auto o = std::make_shared<EvalOptions>();
      add_model_options(cmd, o->model);
      cmd.add_option("--text", o->text_file, "the text to score (UTF-8)")->required()->check(CLI::ExistingFile);
      o->ctx_option = cmd.add_option("--ctx", o->setup.ctx, "tokens per chunk; the second half of each is scored")
                          ->capture_default_str();
      o->chunks_option =
          cmd.add_option("--chunks", o->setup.max_chunks, "score the first N chunks (-1: every full chunk)")
              ->capture_default_str();
      cmd.add_option("--batch", o->setup.batch, "tokens per forward step (a chunk takes ctx / batch steps)")
          ->capture_default_str();
      cmd.add_option("--save-logits", o->setup.save_logits,
                     "save every scored position's log-probabilities here, as a base for --kl-base");
      cmd.add_option("--kl-base", o->setup.kl_base,
                     "compare with a run saved by --save-logits (same model, text and chunking): KL, top-1")
          ->check(CLI::ExistingFile);
      cmd.add_option("--stream", o->setup.stream,
                     "score the first N tokens (0: all) as one stream through kv_cache.window and "
                     "kv_cache.sink_tokens (set with --set; window 0: full attention) instead of chunks");
      cmd.add_flag("--json", o->json, "print one JSON object instead of the result lines");
      return [o]() -> int { return run_eval_command(*o); };
    }};

}  // namespace
}  // namespace llmk::app
