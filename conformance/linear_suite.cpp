// The linear grid: 1 to 33 rows, depths 64, 130 and 515, widths 1 to 129,
// every weight dtype the plugin declares. Each scheme is held to an error
// bound derived from the scheme itself, computed per output from the data:
//
//   float weights ("scheme" absent):  F32 accumulation only,
//       |e| <= 1e-5 * sum_k |x_k w_k|
//   weight-only integer schemes (w8a32-zp, w4a32): each weight within one
//   quantization step s of its group's min/max grid (half a step of rounding,
//   half of the zero point's); a range search that clips keeps the error
//   energy below that grid's, so by Cauchy-Schwarz
//       |e| <= ||x|| * sqrt(sum_k s_k^2) + F32 accumulation
//   w8a8 (symmetric per-channel weights, per-token activations), w4a8 (the
//   4-bit grid, activations per group or per token): as above
//   with s_k = max|w| / 127, plus the activation rounding,
//       + sum_k |w_k| * max|x| / 254 (first order) and its product term.
//   float formats: an operand rounded to a floating-point format (round to
//   nearest) is off by at most d_k = max(u |v_k|, a * scale) per value, u
//   the format's unit roundoff, a half its smallest subnormal step, scale
//   what maps the operand's largest magnitude to the format's largest value
//   (1 where the operand is not scaled), so
//       |e| <= sum_k (dx_k |w_k| + |x_k| dw_k + dx_k dw_k) + F32 accumulation.
//   ggml_a8 (a GGUF file's quantized blocks, "ggml:Q4_K" weight dtypes):
//   the weights are exact as stored; activations are rounded to int8 with
//   one scale s_b = max |x| / 127 per weight block b (32 or 256 values), so
//       |e| <= sum_k |w_k| s_b(k) / 2 + F32 accumulation
//   (the energy check below, sum_k w_k^2 s_b(k)^2 / 12, from 16 rows on);
//   every other row has one block 64 times louder than the rest, so
//   activations rounded with one scale per row fail.
//   A plugin declares what it rounds: "activation_rounding" maps a weight
//   dtype to the format F32 activations are rounded to before the product
//   (linear.cublas: {"f16": "f16", "bf16": "bf16"}, 16-bit tensor-core
//   operands); scheme "fp8_e4m3" rounds weights and activations to E4M3,
//   each scaled by its own maximum (per channel or per token, or per tensor:
//   the suite takes the whole operand's maximum, which bounds both).
//
// Those worst-case bounds catch gross errors (a wrong scale, a lost group);
// the typical error is far smaller. So, where a case has 64 outputs or more,
// the error energy is also held to twice its expectation under uniform
// rounding, sum over outputs of sum_k x_k^2 s_k^2 / 12 (+ the activations'
// sum_k w_k^2 dx^2 / 12): a sum of that many near-Gaussian terms exceeds
// twice its mean with a probability far below 1e-6. For FP8 weights the
// expectation taken is sum_k (x_k^2 dw_k^2 + w_k^2 dx_k^2) / 3, which the
// mean of a rounding error uniform within +-d_k does not exceed.
//
// Activations are F32 in the options' device memory (the host by default);
// the weight is handed over in host memory, as the engine does at load.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "conformance/ggml_weights.hpp"
#include "conformance/linear_scheme.hpp"
#include "conformance/suite.hpp"
#include "core/dtype.hpp"

namespace llmk::conformance {
namespace {

struct WeightType {
  std::string name;
  uint32_t dtype;
  int64_t block_values = 1;  // ggml blocks: values per block
};
// One forward as LinearImpl calls it: x in, y out through the device, the
// workspace the layer asked for max_rows (it may serve fewer rows).
// Returns what failed, or nothing.
std::string forward(const llmk_linear_api& api, void* self, Device& device, const std::vector<float>& x,
                    std::vector<float>& y, uint32_t rows, size_t workspace_bytes) {
  try {
    const DeviceBuffer d_x(device, x), d_y(device, y), workspace(device, workspace_bytes);
    llmk_error err{};
    if (api.forward(self, d_x.data(), d_y.data(), rows, workspace.data(), workspace_bytes, device.stream(), &err) !=
        LLMK_OK)
      return std::string("forward failed: ") + err.message;
    device.synchronize();
    d_y.copy_out(y);
  } catch (const std::exception& e) {
    return std::string("the device failed: ") + e.what();
  }
  return "";
}

const WeightType kWeightTypes[] = {{"f32", LLMK_DTYPE_F32}, {"f16", LLMK_DTYPE_F16}, {"bf16", LLMK_DTYPE_BF16}};

}  // namespace

SuiteResult run_linear_suite(const Plugin& plugin, const SuiteOptions& options) {
  const SuiteDevice device(options.device);
  SuiteResult result = new_result(plugin, *device);
  const auto caps = nlohmann::json::parse(plugin.info().capabilities, nullptr, false);
  Scheme scheme;
  std::string why;
  if (!caps.is_object() || !parse_scheme(caps, scheme, why)) {
    result.errors.push_back(why.empty() ? "capabilities are not a JSON object" : why);
    return result;
  }
  auto failed = [&](const std::string& name, const std::string& detail) {
    result.cases.push_back(CaseResult{name, CaseStatus::failed, "", 0, 0, detail});
  };
  std::vector<std::string> dtypes;
  if (caps.contains("weight_dtypes") && caps["weight_dtypes"].is_array())
    for (const auto& d : caps["weight_dtypes"]) dtypes.push_back(d.get<std::string>());
  if (dtypes.empty()) dtypes.push_back("f32");
  const llmk_linear_api& api = plugin.linear();

  if (scheme.weight_format != nullptr)
    result.notes.push_back(std::string("weights and activations rounded to ") + scheme.weight_format->name +
                           ", each scaled by its maximum, as the scheme declares: the bound allows that rounding");
  std::vector<WeightType> weight_types;
  for (const WeightType& wt : kWeightTypes)
    if (std::find(dtypes.begin(), dtypes.end(), wt.name) != dtypes.end()) weight_types.push_back(wt);
  for (const std::string& d : dtypes) {
    if (d.rfind("ggml:", 0) != 0) continue;
    GgmlWeightType g;
    if (!parse_ggml_weight_type(d, g, why)) {
      result.errors.push_back(why);
      continue;
    }
    weight_types.push_back(WeightType{d, g.dtype, g.block_values});
  }
  for (const WeightType& wt : weight_types) {
    const bool blocks = wt.block_values > 1;
    if (blocks && !scheme.ggml_a8) {
      result.errors.push_back("weight dtype '" + wt.name + "' needs scheme ggml_a8, which the capabilities do not declare");
      continue;
    }
    bool x_scaled = false;
    const FloatFormat* x_format = scheme.activations_with(wt.name, x_scaled);
    if (x_format != nullptr && !x_scaled)
      result.notes.push_back(std::string("weights ") + wt.name + ": activations rounded to " + x_format->name +
                             " as declared (activation_rounding): the bound allows that rounding");
    // Depths in whole blocks for block weights (256 holds one K block, eight of 32).
    const std::vector<int64_t> depths = blocks ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{64, 130, 515};
    for (const int64_t in : depths)
      for (const int64_t out : {1, 17, 129})
        for (const int64_t rows : {1, 3, 16, 33}) {
          const std::string name = std::string("weights ") + wt.name + " " + std::to_string(rows) + "x" +
                                   std::to_string(in) + " -> " + std::to_string(out);
          std::mt19937 rng(static_cast<uint32_t>(in * 7919 + out * 31 + rows + wt.dtype));
          std::normal_distribution<float> normal;
          // Weights as the dtype holds them, and their exact values.
          std::vector<double> w(out * in);
          std::vector<float> w32(out * in);
          std::vector<uint16_t> w16(out * in);
          std::vector<uint8_t> w_blocks;
          if (blocks) w_blocks = random_ggml_weight(GgmlWeightType{wt.dtype, wt.block_values}, out, in, rng, w);
          for (int64_t i = 0; i < out * in && !blocks; ++i) {
            const float v = normal(rng);
            if (wt.dtype == LLMK_DTYPE_F32) {
              w32[i] = v;
              w[i] = v;
            } else if (wt.dtype == LLMK_DTYPE_F16) {
              w16[i] = f32_to_f16(v);
              w[i] = f16_to_f32(w16[i]);
            } else {
              w16[i] = f32_to_bf16(v);
              w[i] = bf16_to_f32(w16[i]);
            }
          }
          std::vector<float> x(rows * in), y(rows * out, NAN);
          for (auto& v : x) v = normal(rng);
          // Block weights: every other row has one block 64 times louder
          // than the rest, which one scale per row would round the other
          // blocks of by (a row of one block, one K block, stays plain).
          if (blocks)
            for (int64_t m = 1; m < rows; m += 2) {
              const int64_t b0 = (m / 2) % (in / wt.block_values) * wt.block_values;
              for (int64_t k = b0; k < b0 + wt.block_values; ++k) x[m * in + k] *= 64;
            }

          const std::string layer = "conformance.layers.0.mlp.up_proj";
          llmk_linear_desc desc{sizeof(llmk_linear_desc), layer.c_str(), static_cast<uint32_t>(in),
                                static_cast<uint32_t>(out), wt.dtype,
                                blocks                     ? static_cast<const void*>(w_blocks.data())
                                : wt.dtype == LLMK_DTYPE_F32 ? static_cast<const void*>(w32.data())
                                                             : w16.data(),
                                1,
                                static_cast<uint32_t>(rows), 2, "{}", device->device(), LLMK_DTYPE_F32};
          char reason[512] = {};
          if (api.supports(&desc, reason, sizeof(reason)) != 1) {
            result.cases.push_back(CaseResult{name, CaseStatus::unsupported, "", 0, 0, reason});
            continue;
          }
          llmk_error err{};
          void* self = api.create(&desc, &err);
          if (self == nullptr) {
            failed(name, std::string("create failed: ") + err.message);
            continue;
          }
          // The workspace a forward asks for never shrinks as rows grow: the
          // host sizes one buffer for max_rows and passes it to every call.
          std::string contract;  // a broken promise other than the numbers
          size_t fewer = 0, most = 0;
          llmk_error ws_err{};
          if (api.workspace_bytes(self, 1, &fewer, &ws_err) != LLMK_OK ||
              api.workspace_bytes(self, static_cast<uint32_t>(rows), &most, &ws_err) != LLMK_OK || fewer > most)
            contract = "workspace_bytes(1) = " + std::to_string(fewer) + " exceeds workspace_bytes(" +
                       std::to_string(rows) + ") = " + std::to_string(most) + " or failed: " + ws_err.message;
          const std::string failure = forward(api, self, *device, x, y, static_cast<uint32_t>(rows), most);
          size_t weight_bytes = 0;
          llmk_error wb_err{};
          if (api.weight_bytes(self, &weight_bytes, &wb_err) != LLMK_OK) weight_bytes = 0;
          api.destroy(self);
          if (!failure.empty()) {
            failed(name, failure);
            continue;
          }
          if (weight_bytes == 0)
            contract += (contract.empty() ? "" : "; ") + std::string("weight_bytes() is 0 or failed");

          // The quantization step of every weight, and per output row j the
          // sum of its weights' squared steps.
          const int64_t group = scheme.group > 0 ? std::min(scheme.group, in) : in;
          std::vector<double> step(out * in, 0.0), step_sq(out, 0.0);
          const bool codebook = scheme.codebook_error > 0 && !blocks;
          if (scheme.weight_levels > 0 || codebook)
            for (int64_t j = 0; j < out; ++j)
              for (int64_t g0 = 0; g0 < in; g0 += group) {
                double lo = 0, hi = 0, mx = 0;
                for (int64_t k = g0; k < std::min(in, g0 + group); ++k) {
                  lo = std::min(lo, w[j * in + k]);
                  hi = std::max(hi, w[j * in + k]);
                  mx = std::max(mx, std::fabs(w[j * in + k]));
                }
                const double s_g = codebook           ? scheme.codebook_error * mx
                                   : scheme.symmetric ? 2 * mx / scheme.weight_levels
                                                      : (hi - lo) / scheme.weight_levels;
                for (int64_t k = g0; k < std::min(in, g0 + group); ++k) step[j * in + k] = s_g;
                step_sq[j] += s_g * s_g * static_cast<double>(std::min(in, g0 + group) - g0);
              }

          // Float formats: the scales that map each operand's largest
          // magnitude to the format's (the whole operand's, which bounds a
          // per-channel or per-token scale's subnormal step too).
          double w_scale = 1, x_scale = 1;
          if (scheme.weight_format != nullptr) {
            double w_max = 0;
            for (const double v : w) w_max = std::max(w_max, std::fabs(v));
            w_scale = w_max / scheme.weight_format->max_finite;
          }
          if (x_format != nullptr && x_scaled) {
            double x_max = 0;
            for (const float v : x) x_max = std::max(x_max, std::fabs(double(v)));
            x_scale = x_max / x_format->max_finite;
          }

          double worst = 0;  // largest error as a fraction of its bound
          double error_energy = 0, expected_energy = 0;
          std::string worst_where;
          for (int64_t m = 0; m < rows; ++m) {
            double x_norm_sq = 0, x_max = 0;
            for (int64_t k = 0; k < in; ++k) {
              x_norm_sq += double(x[m * in + k]) * x[m * in + k];
              x_max = std::max(x_max, std::fabs(double(x[m * in + k])));
            }
            const double x_step = scheme.int8_activations ? x_max / 127 : 0;  // symmetric per-token scale
            // ggml_a8: each weight block's activations on their own int8 scale.
            std::vector<double> block_step;
            if (blocks)
              for (int64_t b0 = 0; b0 < in; b0 += wt.block_values) {
                double b_max = 0;
                for (int64_t k = b0; k < b0 + wt.block_values; ++k) b_max = std::max(b_max, std::fabs(double(x[m * in + k])));
                block_step.push_back(b_max / 127);
              }
            for (int64_t j = 0; j < out; ++j) {
              double ref = 0, mag = 0, w_abs = 0, w_sq = 0, rounding_var = 0;
              for (int64_t k = 0; k < in; ++k) {
                const double p = double(x[m * in + k]) * w[j * in + k];
                ref += p;
                mag += std::fabs(p);
                w_abs += std::fabs(w[j * in + k]);
                w_sq += w[j * in + k] * w[j * in + k];
                rounding_var += double(x[m * in + k]) * x[m * in + k] * step[j * in + k] * step[j * in + k] / 12;
              }
              double bound = 1e-5 * mag + 1e-30;
              if (scheme.weight_levels > 0 || codebook) {
                const double x_hat_norm = std::sqrt(x_norm_sq) + std::sqrt(double(in)) * x_step / 2;
                bound += x_hat_norm * std::sqrt(step_sq[j]) + 1e-5 * (mag + std::sqrt(x_norm_sq * step_sq[j]));
              }
              if (scheme.int8_activations && !blocks) bound += w_abs * x_step / 2;
              if (blocks)
                for (int64_t k = 0; k < in; ++k) {
                  const double s_b = block_step[static_cast<size_t>(k / wt.block_values)];
                  bound += std::fabs(w[j * in + k]) * s_b / 2;
                  expected_energy += w[j * in + k] * w[j * in + k] * s_b * s_b / 12;
                }
              if (scheme.weight_format != nullptr || x_format != nullptr) {
                double rounding = 0;
                for (int64_t k = 0; k < in; ++k) {
                  const double xv = x[m * in + k], wv = w[j * in + k];
                  const double dx = x_format != nullptr ? rounding_error(*x_format, xv, x_scale) : 0;
                  const double dw =
                      scheme.weight_format != nullptr ? rounding_error(*scheme.weight_format, wv, w_scale) : 0;
                  rounding += dx * std::fabs(wv) + std::fabs(xv) * dw + dx * dw;
                  expected_energy += (xv * xv * dw * dw + wv * wv * dx * dx) / 3;
                }
                bound += rounding * (1 + 1e-5);
              }
              const double got = y[m * out + j];
              error_energy += (got - ref) * (got - ref);
              expected_energy += rounding_var;
              if (scheme.int8_activations && !blocks) expected_energy += w_sq * x_step * x_step / 12;
              const double ratio = std::isfinite(got) ? std::fabs(got - ref) / bound : INFINITY;
              if (!(ratio <= worst)) {
                worst = ratio;
                worst_where = "row " + std::to_string(m) + " output " + std::to_string(j) + ": " + std::to_string(got) +
                              " vs " + std::to_string(ref) + " (bound " + std::to_string(bound) + ")";
              }
            }
          }
          // Block weights are exact: all of their error is the activations'
          // rounding, which a row shares across its outputs, so the energy
          // is a sum of many independent terms only over many rows.
          const bool energy_checked =
              ((scheme.weight_levels > 0 || codebook || scheme.weight_format != nullptr) && rows * out >= 64) ||
              (blocks && rows >= 16 && rows * out >= 64);
          if (!contract.empty()) {
            failed(name, contract);
          } else if (!(worst <= 1.0)) {
            result.cases.push_back(CaseResult{name, CaseStatus::failed, "error / bound", worst, 1.0,
                                              "worst at " + worst_where});
          } else if (energy_checked && !(error_energy <= 2 * expected_energy)) {
            result.cases.push_back(CaseResult{name, CaseStatus::failed, "error energy / expected",
                                              error_energy / expected_energy, 2.0,
                                              "twice what uniform rounding gives is the limit"});
          } else {
            result.cases.push_back(CaseResult{name, CaseStatus::passed, "error / bound", worst, 1.0, ""});
          }
        }
  }
  return result;
}

}  // namespace llmk::conformance
