#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
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

TEST_CASE("vector conversions give the scalar bits at the edges of both formats, for every length's tail",
          "[convert]") {
  const float inf = std::numeric_limits<float>::infinity();
  float bf16_nan, bf16_snan_neg;  // a quiet NaN with payload, and a negative signalling one
  const uint32_t qnan = 0x7fc12345u, snan = 0xff812345u;
  std::memcpy(&bf16_nan, &qnan, 4);
  std::memcpy(&bf16_snan_neg, &snan, 4);
  // bf16: ties (1 + 2^-8 rounds to even, 1 + 3 * 2^-8 rounds up), the largest finite, overflow to inf, NaNs.
  const std::vector<float> bf16_edges = {1.00390625f, 1.01171875f, -1.00390625f, 3.3895314e38f, 3.3961776e38f,
                                         -inf, inf, bf16_nan, bf16_snan_neg, 1e-40f, -1e-45f, 0.0f, -0.0f};
  // f16: subnormals (the smallest, halfway below it, the largest), the normal boundary, ties, the largest
  // finite, the last value that rounds to it, the first that overflows.
  const std::vector<float> f16_edges = {5.9604645e-08f, 2.9802322e-08f, 6.097555e-05f, 6.1035156e-05f,
                                        1.00048828125f, 1.00146484375f, 65504.0f, 65519.996f, 65520.0f, -65520.0f,
                                        3e-6f, -3e-6f, -0.0f, inf, -inf};
  for (int n = 0; n <= 40; ++n) {
    CAPTURE(n);
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[i] = bf16_edges[static_cast<size_t>(i) % bf16_edges.size()] * (i % 3 == 2 ? -1.0f : 1.0f);
    std::vector<uint16_t> h(x.size());
    f32_to_bf16(x.data(), h.data(), n);
    for (int i = 0; i < n; ++i) CHECK(h[i] == llmk::f32_to_bf16(x[i]));
    std::vector<float> back(x.size());
    bf16_to_f32(h.data(), back.data(), n);
    for (int i = 0; i < n; ++i) {
      const float want = llmk::bf16_to_f32(h[i]);
      CHECK(std::memcmp(&back[i], &want, 4) == 0);
    }
    for (int i = 0; i < n; ++i) x[i] = f16_edges[static_cast<size_t>(i) % f16_edges.size()];
    f32_to_f16(x.data(), h.data(), n);
    for (int i = 0; i < n; ++i) CHECK(h[i] == llmk::f32_to_f16(x[i]));
    f16_to_f32(h.data(), back.data(), n);
    for (int i = 0; i < n; ++i) {
      const float want = llmk::f16_to_f32(h[i]);
      CHECK(std::memcmp(&back[i], &want, 4) == 0);
    }
  }
}
