#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/vec_math.hpp"

namespace {

// exp of n floats through the vector exp this build has (exp512 on AVX-512,
// exp256 on AVX2 + FMA), else through exp_scalar.
std::vector<float> vector_exp(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= x.size(); i += 16) _mm512_storeu_ps(y.data() + i, llmk::kernels::cpu::exp512(_mm512_loadu_ps(x.data() + i)));
#elif defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= x.size(); i += 8) _mm256_storeu_ps(y.data() + i, llmk::kernels::cpu::exp256(_mm256_loadu_ps(x.data() + i)));
#endif
  for (; i < x.size(); ++i) y[i] = llmk::kernels::cpu::exp_scalar(x[i]);
  return y;
}

}  // namespace

TEST_CASE("the vector exp is within 2.5e-7 relative (about 2 ulp) of exp on [-87, 88.7] and saturates outside", "[vec_math]") {
  std::vector<float> x;
  for (double v = -87.0; v <= 88.0; v += 0.01) x.push_back(static_cast<float>(v));
  x.push_back(88.7f);  // the top of the range: 2^128 times the reduced polynomial
  const size_t num_in_range = x.size();
  for (float v : {-1000.0f, -90.0f, 90.0f, 1000.0f}) x.push_back(v);
  while (x.size() % 16 != 0) x.push_back(0.0f);
  const std::vector<float> y = vector_exp(x);
  for (size_t i = 0; i < num_in_range; ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    INFO("x = " << x[i]);
    CHECK(std::isfinite(y[i]));
    CHECK(std::fabs(y[i] - ref) <= 2.5e-7 * ref);
  }
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  // The vector forms saturate to exp(-87.3) and exp(88.7) instead of 0 and inf.
  for (size_t i = num_in_range; i < num_in_range + 4; ++i) {
    const double ref = std::exp(static_cast<double>(x[i] < 0.0f ? -87.3f : 88.7f));
    INFO("x = " << x[i]);
    CHECK(std::fabs(y[i] - ref) <= 2.5e-7 * ref);
  }
#endif
}

TEST_CASE("abs_max is the largest magnitude for every length and ignores NaNs as std::max does", "[vec_math]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n = 0; n <= 41; ++n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    // The largest magnitude in every position in turn (vector lanes, the tail), negative or not.
    for (int64_t at = 0; at < n; ++at) {
      std::vector<float> y = x;
      y[static_cast<size_t>(at)] = at % 2 ? -100.0f : 100.0f;
      if (n > 1) y[static_cast<size_t>((at + 1) % n)] = nan;  // a NaN beside it, in a lane or the tail
      CAPTURE(n, at);
      CHECK(llmk::kernels::cpu::abs_max(y.data(), n) == 100.0f);
    }
    float ref = 0.0f;
    for (const float v : x) ref = std::max(ref, std::fabs(v));
    CHECK(llmk::kernels::cpu::abs_max(x.data(), n) == ref);
  }
  const std::vector<float> all_nan(19, nan);
  CHECK(llmk::kernels::cpu::abs_max(all_nan.data(), 19) == 0.0f);
  const std::vector<float> signed_zeros{-0.0f, 0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};
  CHECK(llmk::kernels::cpu::abs_max(signed_zeros.data(), 9) == 0.0f);
  const float inf[9] = {1, 2, 3, -std::numeric_limits<float>::infinity(), 5, 6, 7, 8, 9};
  CHECK(llmk::kernels::cpu::abs_max(inf, 9) == std::numeric_limits<float>::infinity());
}
