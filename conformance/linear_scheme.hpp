// What a linear plugin's capabilities say it computes, as the linear suite
// reads them to bound its error (linear_suite.cpp derives the bounds):
// "scheme" names a weight quantization, "activation_rounding" the float
// format F32 activations are rounded to before the product.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llmk::conformance {

// A floating-point format an operand is rounded to (round to nearest).
struct FloatFormat {
  const char* name;
  double unit_roundoff;    // most |error| / |value| for a normal value
  double subnormal_error;  // most |error| below the normal range: half the subnormal step
  double max_finite;       // what a scaled operand's largest magnitude maps to
};

// The most a value v of an operand rounded to `f` moves; `scale` maps the
// operand into the format (1 when it is not scaled).
double rounding_error(const FloatFormat& f, double v, double scale);

struct Scheme {
  int weight_levels = 0;   // 0: float weights; 255 (8-bit) or 15 (4-bit) steps across a group's range
  bool symmetric = false;  // symmetric range (+-max|w|) instead of min..max
  int64_t group = 0;       // values per weight range along in_features; 0: the whole row
  bool int8_activations = false;
  // "lut4": each weight on a 16-value codebook times its block's scale; the
  // most a weight moves, as a fraction of its group's max |w| (0: no codebook).
  double codebook_error = 0;
  // "ggml_a8": weights as stored ggml blocks (exact), activations rounded to
  // int8 with one scale (max |x| / 127) per weight block of in_features.
  bool ggml_a8 = false;
  const FloatFormat* weight_format = nullptr;      // weights rounded to it, scaled by their maximum
  const FloatFormat* activation_format = nullptr;  // activations likewise
  // Weight dtype -> the unscaled format F32 activations are rounded to with it.
  std::vector<std::pair<std::string, const FloatFormat*>> activation_rounding;

  // The format activations are rounded to with weights of `weight_dtype`
  // (the scheme's, else the declared rounding); null when they stay F32.
  const FloatFormat* activations_with(const std::string& weight_dtype, bool& scaled) const;
};

// The scheme `caps` declares (float weights, F32 activations where it
// declares nothing). False, with why, for a declaration the suite has no
// error bound for: it cannot bound what it does not know.
bool parse_scheme(const nlohmann::json& caps, Scheme& s, std::string& why);

}  // namespace llmk::conformance
