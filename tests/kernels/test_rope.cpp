#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/rope.hpp"

using namespace llmk::kernels::cpu;

TEST_CASE("rope rotates each half-pair by position times theta^(-2i/d), reading strided rows", "[rope]") {
  const int64_t head_dim = GENERATE(2, 18, 64, 70);
  const int64_t num_heads = 3, num_tokens = 5, max_pos = 600;
  const double theta = 10000.0;
  std::vector<float> cos_t(max_pos * head_dim / 2), sin_t(max_pos * head_dim / 2);
  rope_tables(theta, head_dim, max_pos, cos_t.data(), sin_t.data());
  // Source rows are wider than the heads (a slice of a fused qkv row).
  const int64_t src_stride = num_heads * head_dim + 11;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> src(num_tokens * src_stride);
  for (auto& x : src) x = normal(rng);
  std::vector<int32_t> pos{0, 1, 7, 599, 300};
  std::vector<float> dst(num_tokens * num_heads * head_dim);
  rope(src.data(), src_stride, dst.data(), num_heads * head_dim, num_tokens, num_heads, head_dim, pos.data(),
       cos_t.data(), sin_t.data());
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t h = 0; h < num_heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos[t] * std::pow(theta, -2.0 * i / head_dim);
        const double x1 = src[t * src_stride + h * head_dim + i], x2 = src[t * src_stride + h * head_dim + half + i];
        const float* y = dst.data() + (t * num_heads + h) * head_dim;
        CHECK(y[i] == Approx(x1 * std::cos(angle) - x2 * std::sin(angle)).margin(2e-6));
        CHECK(y[half + i] == Approx(x2 * std::cos(angle) + x1 * std::sin(angle)).margin(2e-6));
      }
}

TEST_CASE("rope works in place", "[rope]") {
  const int64_t head_dim = 32, max_pos = 8;
  std::vector<float> cos_t(max_pos * 16), sin_t(max_pos * 16);
  rope_tables(500000.0, head_dim, max_pos, cos_t.data(), sin_t.data());
  std::vector<float> x(2 * head_dim), expected(2 * head_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.1f - 2.0f;
  std::vector<int32_t> pos{5, 3};
  rope(x.data(), head_dim, expected.data(), head_dim, 2, 1, head_dim, pos.data(), cos_t.data(), sin_t.data());
  rope(x.data(), head_dim, x.data(), head_dim, 2, 1, head_dim, pos.data(), cos_t.data(), sin_t.data());
  CHECK(x == expected);
}
