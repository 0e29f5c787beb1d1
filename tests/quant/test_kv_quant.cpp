// Int8 KV cache quantization: group-wise symmetric scales along head_dim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kv_quant.hpp"
#include "quant/quant_test_util.hpp"

using namespace llmk::kernels::cpu;

TEST_CASE("KV rows quantize per group within half a step and dequantize to q times scale", "[quant][kv]") {
  for (const int64_t head_dim : {8, 48, 64, 96, 128}) {
    for (const int64_t group : {4, 8, 16, 32, 48, 64}) {
      if (head_dim % group != 0) continue;
      const int64_t num_kv_heads = 3, rows = 5, dim = num_kv_heads * head_dim, num_groups = dim / group;
      CAPTURE(head_dim, group);
      const auto src = llmk::test::random_matrix(rows, dim, 91, 2);
      std::vector<int8_t> q(static_cast<size_t>(rows * dim));
      std::vector<float> scales(static_cast<size_t>(rows * num_groups));
      kv_quantize(src.data(), q.data(), scales.data(), rows, dim, group);
      std::vector<float> deq(src.size());
      kv_dequantize(q.data(), scales.data(), deq.data(), rows, dim, group);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < num_groups; ++g) {
          double amax = 0.0;
          for (int64_t i = g * group; i < (g + 1) * group; ++i) amax = std::max(amax, std::fabs(double(src[r * dim + i])));
          const float s = scales[r * num_groups + g];
          REQUIRE(s == Approx(amax / 127.0).epsilon(1e-6).margin(1e-30));
          for (int64_t i = g * group; i < (g + 1) * group; ++i) {
            const int qi = q[r * dim + i];
            REQUIRE(std::abs(qi) <= 127);
            REQUIRE(deq[r * dim + i] == float(qi) * s);
            REQUIRE(std::fabs(src[r * dim + i] - double(qi) * s) <= s * (0.5 + 1e-5));
          }
        }
    }
  }
}

TEST_CASE("KV quantization writes each token to its slot and skips negative slots", "[quant][kv]") {
  const int64_t dim = 32, group = 8, num_slots = 10, rows = 4;
  const auto src = llmk::test::random_matrix(rows, dim, 92);
  std::vector<int8_t> cache(static_cast<size_t>(num_slots * dim), 99);
  std::vector<float> cache_scales(static_cast<size_t>(num_slots * dim / group), -1.0f);
  const int32_t slots[rows] = {7, -1, 0, 3};
  kv_quantize_to_slots(src.data(), slots, rows, dim, group, cache.data(), cache_scales.data());
  std::vector<int8_t> expect_q(static_cast<size_t>(dim));
  std::vector<float> expect_s(static_cast<size_t>(dim / group));
  for (int64_t r = 0; r < rows; ++r) {
    if (slots[r] < 0) continue;
    kv_quantize(src.data() + r * dim, expect_q.data(), expect_s.data(), 1, dim, group);
    REQUIRE(std::equal(expect_q.begin(), expect_q.end(), cache.begin() + slots[r] * dim));
    REQUIRE(std::equal(expect_s.begin(), expect_s.end(), cache_scales.begin() + slots[r] * dim / group));
  }
  for (const int64_t untouched : {1, 2, 4, 5, 6, 8, 9}) {
    REQUIRE(std::all_of(cache.begin() + untouched * dim, cache.begin() + (untouched + 1) * dim,
                        [](int8_t v) { return v == 99; }));
    REQUIRE(cache_scales[untouched * dim / group] == -1.0f);
  }
}
