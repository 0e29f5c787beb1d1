// `llmk quantize`'s driver: runs the float model over calibration samples
// layer by layer and quantizes each decoder layer's seven projections with
// RTN, GPTQ, AWQ or SmoothQuant (W8A8), the inputs of layer i (and of each projection inside
// it) computed with everything before it already quantized, as the GPTQ
// paper does (AWQ and SmoothQuant compute a layer's scales on its float
// inputs, then round). The embedding, norms and lm_head stay float; AWQ and
// SmoothQuant rescale the norms (and up_proj / v_proj rows) their scales
// fold into (scale_fold.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "apps/quantize/group_quant.hpp"
#include "core/checkpoint.hpp"

namespace llmk::quantize {

enum class Method { rtn, gptq, awq, smoothquant };

struct QuantizeOptions {
  Method method = Method::gptq;
  QuantSpec spec;
  int64_t num_samples = 8;   // calibration sequences
  int64_t seq_len = 256;     // tokens each
  int awq_grid = 20;
  double alpha = 0.5;         // SmoothQuant's migration strength (smoothquant.hpp)
  bool round_weights = true;  // false: SmoothQuant only smooths; result.floats holds every changed tensor
};

// One projection's output error on its calibration inputs (per row, summed
// over outputs), quantized by the method and by plain rounding (RTN) of the
// same weights; for AWQ, error and rtn_error are the fused group's (q/k/v,
// gate/up) and repeat on each member. SmoothQuant: the group's W8A8 error
// (weights per channel, activations per token) with smoothing, and without
// (rtn_error).
struct LinearReport {
  std::string name;  // "model.layers.3.self_attn.q_proj"
  double error = 0.0;
  double rtn_error = 0.0;
  bool kept_float = false;  // its shape does not pack in the format: left in float
};

// One input SmoothQuant smoothed, over its calibration rows: the largest |x| and the outlier ratio (the
// largest channel max over the median channel max), before and after dividing by the scales.
struct SmoothReport {
  std::string input;  // "model.layers.3.self_attn.qkv"
  double abs_max = 0.0, smoothed_abs_max = 0.0;
  double outlier_ratio = 0.0, smoothed_outlier_ratio = 0.0;
};

struct QuantizeResult {
  std::map<std::string, QuantizedLinear> linears;       // by projection name
  std::map<std::string, std::vector<float>> floats;     // float tensors the output stores changed (AWQ, SmoothQuant)
  std::vector<LinearReport> report;
  std::vector<SmoothReport> smoothing;                  // SmoothQuant
};

// Whether the method's file format can store an [out, in] projection in these groups.
bool packable(Method method, const QuantSpec& spec, int64_t out, int64_t in);

// tokens: at least num_samples * seq_len calibration ids (each sample a
// consecutive slice). on_layer(done, total) after each decoder layer.
QuantizeResult quantize_model(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                              const QuantizeOptions& options,
                              const std::function<void(int32_t, int32_t)>& on_layer = {});

}  // namespace llmk::quantize
