// What every linear plugin, CPU or CUDA, reads from its desc the same way:
// the layer's name for messages, the options JSON object with its known
// keys, one-of-a-list string options, and the checkpoint weight as f32.
// Header-only, host code (the plugin links llmk_kernels_cpu for the weight
// conversion); the CPU plugins reach it through linear_common.hpp, the CUDA
// ones through cuda_quant_common.hpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "plugins/api/plugin_helpers.hpp"

namespace llmk::linear_options {

inline std::string layer_name(const llmk_linear_desc& d) { return d.name != nullptr ? d.name : "(unnamed layer)"; }

inline nlohmann::json parse_options(const llmk_linear_desc& d) {
  const char* text = d.options != nullptr && d.options[0] != '\0' ? d.options : "{}";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, layer_name(d) + ": plugin options are not a JSON object: " + text);
  return j;
}

// Rejects option keys outside `known`, naming the first unknown one.
inline void check_option_keys(const nlohmann::json& options, const std::vector<std::string>& known,
                              const llmk_linear_desc& d) {
  for (const auto& item : options.items()) {
    bool ok = false;
    for (const auto& k : known) ok = ok || item.key() == k;
    if (ok) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT,
                        layer_name(d) + ": unknown plugin option \"" + item.key() + "\" (known: " + list + ")");
  }
}

// A string option that must be one of `allowed`; `fallback` when absent.
inline std::string choice_option(const nlohmann::json& options, const char* key, const std::string& fallback,
                                 const std::vector<std::string>& allowed, const llmk_linear_desc& d) {
  if (!options.contains(key)) return fallback;
  const auto& v = options[key];
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  if (v.is_string())
    for (const auto& a : allowed)
      if (v.get<std::string>() == a) return a;
  throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT,
                      layer_name(d) + ": option " + key + " is " + v.dump() + ", expected one of " + list);
}

// The checkpoint weight [out_features, in_features] as f32 (a host copy).
inline std::vector<float> weight_as_f32(const llmk_linear_desc& d) {
  const size_t n = static_cast<size_t>(d.out_features) * d.in_features;
  std::vector<float> w(n);
  const auto* half = static_cast<const uint16_t*>(d.weight);
  switch (d.weight_dtype) {
    case LLMK_DTYPE_F32:
      std::memcpy(w.data(), d.weight, n * sizeof(float));
      break;
    case LLMK_DTYPE_BF16:
      kernels::cpu::bf16_to_f32(half, w.data(), static_cast<int64_t>(n));
      break;
    case LLMK_DTYPE_F16:
      kernels::cpu::f16_to_f32(half, w.data(), static_cast<int64_t>(n));
      break;
    default:
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, layer_name(d) + ": weight dtype " + std::to_string(d.weight_dtype) +
                                                    " is not f32, f16 or bf16");
  }
  return w;
}

}  // namespace llmk::linear_options
