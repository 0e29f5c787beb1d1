#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/silu_mul.hpp"

TEST_CASE("silu_mul computes silu(gate) * up within 4e-7 relative, tails and extremes included", "[silu]") {
  const int64_t dim = GENERATE(1, 15, 16, 173, 1000);
  const int64_t rows = 3;
  std::mt19937 rng(static_cast<uint32_t>(dim));
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> gate_up(rows * 2 * dim), out(rows * dim);
  for (auto& x : gate_up) x = normal(rng);
  gate_up[0] = -120.0f;  // exp overflow territory
  gate_up[dim > 1 ? 1 : 0] = 95.0f;
  llmk::kernels::cpu::silu_mul(gate_up.data(), out.data(), rows, dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i) {
      const double g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
      const double ref = g / (1.0 + std::exp(-g)) * u;
      CHECK(std::fabs(out[r * dim + i] - ref) <= 4e-7 * std::fabs(ref) + 1e-30);
    }
}
