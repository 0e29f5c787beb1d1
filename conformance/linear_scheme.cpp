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
    } else if (name == "ggml_a8") {
      s.ggml_a8 = true;
    } else if (name == "fp8_e4m3") {
      s.weight_format = s.activation_format = float_format("e4m3");
    } else {
      why = "capabilities declare scheme '" + name +
            "', which the suite has no error bound for (known: w8a8, w8a32-zp, w4a32, w4a8, fp8_e4m3, ggml_a8)";
      return false;
    }
  }
  return parse_activation_rounding(caps, s, why);
}

}  // namespace llmk::conformance
