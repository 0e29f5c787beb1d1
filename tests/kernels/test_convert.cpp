#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/convert.hpp"

using namespace llmk::kernels::cpu;

TEST_CASE("vector conversions agree with the scalar reference conversions on every path", "[convert]") {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> x(1000 + 7);
  for (auto& v : x) v = normal(rng);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-6f, x[3] = 70000.0f, x[4] = std::numeric_limits<float>::infinity();
  x[5] = 1.00390625f;  // halfway between two bf16 values: ties to even
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  f32_to_bf16(x.data(), h.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) CHECK(h[i] == llmk::f32_to_bf16(x[i]));
  bf16_to_f32(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) CHECK(back[i] == llmk::bf16_to_f32(h[i]));
  f32_to_f16(x.data(), h.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) CHECK(h[i] == llmk::f32_to_f16(x[i]));
  f16_to_f32(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) CHECK(back[i] == llmk::f16_to_f32(h[i]));
}
