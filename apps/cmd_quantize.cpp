// llmk quantize: a float checkpoint (safetensors folder or GGUF file) to a
// GPTQ, AWQ or compressed-tensors W8A8 folder (apps/quantize/), calibrated
// on a text: RTN (plain rounding, the baseline), GPTQ (Hessian-based error
// compensation, optional act-order), AWQ (activation-aware per-channel
// scales) or SmoothQuant (activation outliers migrated into the weights,
// then int8 weights per channel for int8 activations per token); GPTQ may
// keep SpQR-style outliers (--outliers 0.5%: the most sensitive weights as
// f16 residuals in a sparse list, apps/quantize/group_quant.hpp). Prints
// each projection's output error on its calibration inputs against RTN's,
// and the bits per weight the file stores.
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
#include "core/int_groups.hpp"
#include "core/tokenizer.hpp"

namespace llmk::app {
namespace {

struct QuantizeCommand {
  ModelOptions model;
  std::string text_file, out_dir, method = "gptq", outliers = "0";
  quantize::QuantizeOptions options;
  bool report = false;
};

// "0.5%" or "0.005": a fraction in [0, 1).
double parse_fraction(const std::string& text) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  size_t used = 0;
  double v = -1.0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || number.empty()) v = -1.0;
  if (percent) v /= 100.0;
  if (!(v >= 0.0 && v < 1.0))
    throw Error(ErrorCode::invalid_argument,
                "quantize: --outliers '" + text + "' is not a fraction in [0, 1) (write 0.5% or 0.005)");
  return v;
}

// Bits per weight of the quantized projections as the folder stores them: the integers, an f16 scale and
// a zero point of `bits` per group, and per outlier an I32 column and an f16 value, plus an I32 row_ptr
// per output row (g_idx, I32 per input column, is left out: a loader may drop it without act-order).
double stored_bits_per_weight(const quantize::QuantizeResult& result) {
  double bits = 0.0, weights = 0.0;
  for (const auto& [name, q] : result.linears) {
    const IntGroupsWeight& w = q.weight;
    const double n = static_cast<double>(w.out_features) * w.in_features;
    weights += n;
    bits += n * w.bits + static_cast<double>(w.out_features) * w.num_groups() * (16 + w.bits);
    if (!q.outliers.row_ptr.empty()) bits += q.outliers.size() * 48.0 + q.outliers.row_ptr.size() * 32.0;
  }
  return weights > 0 ? bits / weights : 0.0;
}

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
  c.options.spec.outlier_fraction = parse_fraction(c.outliers);
  if (c.options.spec.outlier_fraction > 0.0 && c.options.method != quantize::Method::gptq)
    throw Error(ErrorCode::invalid_argument, "quantize: --outliers keeps SpQR-style outliers during GPTQ (--method gptq)");
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
  size_t num_outliers = 0, num_weights = 0;
  for (const auto& [name, q] : result.linears)
    num_outliers += q.outliers.size(), num_weights += static_cast<size_t>(q.weight.out_features) * q.weight.in_features;
  if (c.options.spec.outlier_fraction > 0.0)
    std::printf("quantize: %zu outliers kept (%.4g%% of %zu quantized weights)\n", num_outliers,
                100.0 * static_cast<double>(num_outliers) / static_cast<double>(std::max<size_t>(num_weights, 1)),
                num_weights);
  if (c.options.method != quantize::Method::smoothquant)
    std::printf("quantize: %.4g bits per quantized weight as stored (integers, f16 scales, zero points%s)\n",
                stored_bits_per_weight(result), num_outliers > 0 ? ", outliers at 48 bits each and row pointers" : "");
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
      cmd.add_option("--outliers", c->outliers,
                     "GPTQ: the share of each projection's weights kept as SpQR-style outliers (f16, sparse), "
                     "e.g. 0.5% or 0.005")
          ->capture_default_str();
      cmd.add_flag("--report", c->report, "print every projection's output error beside RTN's");
      return [c]() -> int { return run_quantize(*c); };
    }};

}  // namespace
}  // namespace llmk::app
