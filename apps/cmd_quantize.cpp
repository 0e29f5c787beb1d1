// llmk quantize: a float checkpoint (safetensors folder or GGUF file) to a
// GPTQ, AWQ or compressed-tensors W8A8 folder (apps/quantize/), calibrated
// on a text: RTN (plain rounding, the baseline), GPTQ (Hessian-based error
// compensation, optional act-order), AWQ (activation-aware per-channel
// scales) or SmoothQuant (activation outliers migrated into the weights,
// then int8 weights per channel for int8 activations per token). Prints each
// projection's output error on its calibration inputs against RTN's.
#include <CLI/CLI.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "apps/command.hpp"
#include "apps/eval/progress.hpp"
#include "apps/model_options.hpp"
#include "apps/quantize/quantized_writer.hpp"
#include "apps/quantize/quantizer.hpp"
#include "core/error.hpp"
#include "core/tokenizer.hpp"

namespace llmk::app {
namespace {

struct QuantizeCommand {
  ModelOptions model;
  std::string text_file, out_dir, method = "gptq";
  quantize::QuantizeOptions options;
  bool report = false;
};

int run_quantize(QuantizeCommand& c) {
  EngineConfig cfg = build_engine_config(c.model);
  c.options.method = c.method == "rtn"           ? quantize::Method::rtn
                     : c.method == "awq"         ? quantize::Method::awq
                     : c.method == "smoothquant" ? quantize::Method::smoothquant
                                                 : quantize::Method::gptq;
  if (c.options.method == quantize::Method::smoothquant) {  // W8A8: int8 per output channel
    c.options.spec.bits = 8;
    c.options.spec.group_size = -1;
  }
  if (c.options.method == quantize::Method::awq && c.options.spec.bits != 4)
    throw Error(ErrorCode::invalid_argument, "quantize: --method awq writes 4-bit weights (--bits 4)");
  c.options.spec.min_zero = c.options.method == quantize::Method::awq ? 0 : 1;  // GPTQ v1 stores zero - 1
  if (cfg.executor.num_threads > 0) omp_set_num_threads(cfg.executor.num_threads);
  const std::shared_ptr<const Checkpoint> checkpoint = open_model(cfg.model);
  std::ifstream in(c.text_file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const Tokenizer tokenizer(checkpoint->tokenizer_path());
  const std::vector<int32_t> tokens = tokenizer.encode(text.str(), false);

  eval::Progress progress("quantize " + c.method);
  const auto start = std::chrono::steady_clock::now();
  const quantize::QuantizeResult result =
      quantize::quantize_model(*checkpoint, tokens, c.options, [&](int32_t done, int32_t total) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress.update(done, total, s, "layers");
      });
  progress.finish();
  const std::string note = quantize::write_quantized(*checkpoint, cfg.model.path, result, c.options, c.out_dir);

  // SmoothQuant's baseline is the same W8A8 rounding without smoothing.
  const char* baseline = c.options.method == quantize::Method::smoothquant ? "unsmoothed W8A8" : "RTN";
  int kept = 0, better = 0, quantized = 0;
  double err = 0, rtn = 0;
  for (const auto& r : result.report) {
    if (r.kept_float) {
      ++kept;
      continue;
    }
    ++quantized;
    better += r.error < r.rtn_error ? 1 : 0;
    err += r.error;
    rtn += r.rtn_error;
    if (c.report) std::printf("%-44s error %.6g  %s %.6g\n", r.name.c_str(), r.error, baseline, r.rtn_error);
  }
  double ratio = 0, smoothed_ratio = 0;
  for (const auto& s : result.smoothing) {
    ratio = std::max(ratio, s.outlier_ratio);
    smoothed_ratio = std::max(smoothed_ratio, s.smoothed_outlier_ratio);
    if (c.report)
      std::printf("%-44s max |x| %.4g -> %.4g, outlier ratio %.4g -> %.4g\n", s.input.c_str(), s.abs_max,
                  s.smoothed_abs_max, s.outlier_ratio, s.smoothed_outlier_ratio);
  }
  if (!result.smoothing.empty())
    std::printf("quantize: smoothquant, alpha %.3g: %zu inputs smoothed; largest outlier ratio (channel max / median "
                "channel max) %.4g -> %.4g\n",
                c.options.alpha, result.smoothing.size(), ratio, smoothed_ratio);
  std::printf("quantize: %s, %d bits, group %lld%s: %d projections quantized (%d below %s's output error; summed "
              "error %.6g vs %s %.6g), %d kept in float; wrote %s\n",
              c.method.c_str(), c.options.spec.bits, static_cast<long long>(c.options.spec.group_size),
              c.options.spec.act_order ? ", act-order" : "", quantized, better, baseline, err, baseline, rtn, kept,
              c.out_dir.c_str());
  if (!note.empty()) std::printf("quantize: %s\n", note.c_str());
  return 0;
}

const CommandRegistration registration{
    "quantize",
    "Quantize a float checkpoint to a GPTQ, AWQ or compressed-tensors W8A8 folder, calibrated on a text (RTN, GPTQ, "
    "AWQ, SmoothQuant)",
    [](CLI::App& cmd) {
      auto c = std::make_shared<QuantizeCommand>();
      add_model_options(cmd, c->model);
      cmd.add_option("--text", c->text_file, "calibration text (UTF-8)")->required()->check(CLI::ExistingFile);
      cmd.add_option("--out", c->out_dir, "the folder to write")->required();
      cmd.add_option("--method", c->method, "rtn | gptq | awq | smoothquant (W8A8: int8 weights per channel)")
          ->check(CLI::IsMember({"rtn", "gptq", "awq", "smoothquant"}))
          ->capture_default_str();
      cmd.add_option("--bits", c->options.spec.bits, "4 or 8 (AWQ: 4)")->check(CLI::IsMember({4, 8}))->capture_default_str();
      cmd.add_option("--group-size", c->options.spec.group_size, "inputs per group (-1: one per row)")
          ->capture_default_str();
      cmd.add_flag("--act-order", c->options.spec.act_order, "GPTQ: columns in decreasing Hessian diagonal order");
      cmd.add_option("--damp", c->options.spec.damp, "GPTQ: damping, a fraction of the mean Hessian diagonal")
          ->capture_default_str();
      cmd.add_option("--samples", c->options.num_samples, "calibration sequences")->capture_default_str();
      cmd.add_option("--seq-len", c->options.seq_len, "tokens per calibration sequence")->capture_default_str();
      cmd.add_option("--awq-grid", c->options.awq_grid, "AWQ: scale exponents tried in [0, 1)")->capture_default_str();
      cmd.add_option("--alpha", c->options.alpha, "SmoothQuant: migration strength in [0, 1]")
          ->check(CLI::Range(0.0, 1.0))
          ->capture_default_str();
      cmd.add_flag("--report", c->report, "print every projection's output error beside RTN's");
      return [c]() -> int { return run_quantize(*c); };
    }};

}  // namespace
}  // namespace llmk::app
