#include "conformance/linear_scheme.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace llmk::conformance {
namespace {

constexpr FloatFormat kFloatFormats[] = {
    {"f16", 0x1p-11, 0x1p-25, 65504.0},
    {"bf16", 0x1p-8, 0x1p-134, 0x1.fep127},
    {"e4m3", 0x1p-4, 0x1p-10, 448.0},
};

const FloatFormat* float_format(const std::string& name) {
  for (const FloatFormat& f : kFloatFormats)
    if (name == f.name) return &f;
  return nullptr;
}

// "activation_rounding": {"<weight dtype>": "f16" | "bf16", ...}.
bool parse_activation_rounding(const nlohmann::json& caps, Scheme& s, std::string& why) {
  if (!caps.contains("activation_rounding")) return true;
  const auto& rounding = caps["activation_rounding"];
  if (!rounding.is_object()) {
    why = "capabilities: activation_rounding must be an object of weight dtype -> format";
    return false;
  }
  for (const auto& [dtype, format] : rounding.items()) {
    if (dtype != "f32" && dtype != "f16" && dtype != "bf16") {
      why = "capabilities: activation_rounding names weight dtype '" + dtype + "' (known: f32, f16, bf16)";
      return false;
    }
    const FloatFormat* f = format.is_string() ? float_format(format.get<std::string>()) : nullptr;
    if (f == nullptr || f->max_finite < 65504.0) {  // unscaled: only the 16-bit formats hold F32 activations
      why = "capabilities: activation_rounding." + dtype + " is " + format.dump() +
            ", not a format the suite bounds unscaled activations in (f16, bf16)";
      return false;
    }
    s.activation_rounding.emplace_back(dtype, f);
  }
  return true;
}

// The most a weight w, |w| <= max |w| of its block, moves when the block's
// max |w| goes to the codebook's end and w to its nearest value (half the
// widest gap, or the shorter end's shortfall), as a fraction of max |w|;
// plus the f16-rounded scale's share where blocks of 32 keep it in f16, and
// (int8 activations) half a step of the 1/127 grid its levels are on.
double codebook_error(const std::string& codebook, int64_t block, bool int8_levels) {
  // Published values: NF4 (QLoRA's NormalFloat, bitsandbytes' quant_map), IQ4_NL (ggml).
  static const double nf4[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                                 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};
  static const double iq4_nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const double* v = codebook == "nf4" ? nf4 : codebook == "iq4_nl" ? iq4_nl : nullptr;
  if (v == nullptr) return 0;
  const double end = std::max(std::fabs(v[0]), std::fabs(v[15]));
  double e = std::max(end - std::fabs(v[0]), end - std::fabs(v[15]));
  for (int i = 0; i < 15; ++i) e = std::max(e, (v[i + 1] - v[i]) / 2);
  e /= end;
  if (block == 32) e += 0x1p-11;
  if (int8_levels && codebook == "nf4") e += 0.5 / 127;
  return e;
}

}  // namespace

double rounding_error(const FloatFormat& f, double v, double scale) {
  return std::max(f.unit_roundoff * std::fabs(v), f.subnormal_error * scale);
}

const FloatFormat* Scheme::activations_with(const std::string& weight_dtype, bool& scaled) const {
  scaled = activation_format != nullptr;
  if (scaled) return activation_format;
  for (const auto& [dtype, f] : activation_rounding)
    if (dtype == weight_dtype) return f;
  return nullptr;
}

bool parse_scheme(const nlohmann::json& caps, Scheme& s, std::string& why) {
  if (caps.contains("scheme")) {
    const std::string name = caps["scheme"].is_string() ? caps["scheme"].get<std::string>() : "";
    const auto& options =
        caps.contains("options") && caps["options"].is_object() ? caps["options"] : nlohmann::json::object();
    auto integer = [&](int levels, bool symmetric, int64_t group, bool int8_activations) {
      s.weight_levels = levels;
      s.symmetric = symmetric;
      s.group = group;
      s.int8_activations = int8_activations;
    };
    if (name == "w8a8") {
      integer(255, true, 0, true);
    } else if (name == "w8a32-zp") {
      integer(255, false, 0, false);
    } else if (name == "w4a32") {
      integer(15, false, options.value("group_size", int64_t{128}), false);
    } else if (name == "w4a8") {
      // Activations rounded per weight group (never coarser than per token, which the bound assumes).
      integer(15, false, options.value("group_size", int64_t{128}), true);
    } else if (name == "lut4") {
      // Weights from floats: a codebook per block, activations int8 per 32
      // inputs (within the per-token bound); stored blocks: as ggml_a8.
      const std::string codebook = options.value("codebook", std::string("iq4_nl"));
      const int64_t block = options.value("block_size", int64_t{codebook == "nf4" ? 64 : 32});
      const bool int8 = options.value("activations", std::string("int8")) == "int8";
      integer(0, true, block, int8);
      s.codebook_error = codebook_error(codebook, block, int8);
      s.ggml_a8 = true;
      if (s.codebook_error == 0) {
        why = "capabilities declare scheme lut4 with codebook '" + codebook + "' (known: nf4, iq4_nl)";
        return false;
      }
    } else if (name == "ggml_a8") {
      s.ggml_a8 = true;
    } else if (name == "fp8_e4m3") {
      s.weight_format = s.activation_format = float_format("e4m3");
    } else {
      why = "capabilities declare scheme '" + name +
            "', which the suite has no error bound for (known: w8a8, w8a32-zp, w4a32, w4a8, fp8_e4m3, ggml_a8, lut4)";
      return false;
    }
  }
  return parse_activation_rounding(caps, s, why);
}

}  // namespace llmk::conformance
