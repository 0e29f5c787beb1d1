// Float64 references for the 16-bit formats, written from the IEEE-style
// definitions (sign, biased exponent, significand) and independent of both
// the toolkit's and the engine's conversion code: the tests' yardstick for
// every kernel that stores or reads f16 / bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/dtype.hpp"
#include "plugins/api/llmk_plugin.h"

namespace llmk::cudasim_test {

// A binary floating-point format with `precision` significand bits (the
// implicit one included), normal exponents down to `min_exponent`, gradual
// underflow below it, and largest finite value `max_finite`.
struct float_format {
  int precision;
  int min_exponent;
  double max_finite;
  int exponent_bits;
};
inline constexpr float_format kBf16Format{8, -126, 0x1.fep127, 8};
inline constexpr float_format kF16Format{11, -14, 65504.0, 5};

inline const float_format& format_of(llmk_dtype dtype) { return dtype == LLMK_DTYPE_BF16 ? kBf16Format : kF16Format; }

// The kernels' name for a dtype (kernels/cuda/dtype.hpp numbers them as the
// plugin ABI does).
inline cuda::DType kernel_dtype(llmk_dtype dtype) { return static_cast<cuda::DType>(dtype); }

// x rounded to the nearest value of the format, ties to even; beyond the
// largest finite value (after rounding), infinity. x must not be NaN.
inline double round_to_format(double x, const float_format& format) {
  if (x == 0.0 || std::isinf(x)) return x;
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| in [2^(exponent-1), 2^exponent)
  const int unit_exponent = std::max(exponent - 1, format.min_exponent) - (format.precision - 1);
  const double units = std::ldexp(x, -unit_exponent);           // exact: a power-of-two scale
  const double rounded = std::ldexp(std::nearbyint(units), unit_exponent);  // nearbyint: ties to even
  if (std::abs(rounded) > format.max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

// The value of a 16-bit pattern: 1 sign bit, exponent_bits, the rest significand.
inline double decode_16(uint16_t bits, const float_format& format) {
  const int fraction_bits = 15 - format.exponent_bits;
  const int exponent_field = (bits >> fraction_bits) & ((1 << format.exponent_bits) - 1);
  const int fraction = bits & ((1 << fraction_bits) - 1);
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int max_field = (1 << format.exponent_bits) - 1;
  if (exponent_field == max_field)
    return fraction ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exponent_field == 0) return sign * std::ldexp(fraction, format.min_exponent - fraction_bits);
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  return sign * std::ldexp(fraction + (1 << fraction_bits), exponent_field - bias - fraction_bits);
}

inline double decode_bf16(uint16_t bits) { return decode_16(bits, kBf16Format); }
inline double decode_f16(uint16_t bits) { return decode_16(bits, kF16Format); }

// Half of the format's relative spacing: the largest relative error of one
// rounding to it (normal range).
inline double half_ulp(const float_format& format) { return std::ldexp(1.0, -format.precision); }

}  // namespace llmk::cudasim_test
