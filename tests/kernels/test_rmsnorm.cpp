#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/rmsnorm.hpp"

TEST_CASE("rmsnorm and add_rmsnorm match a float64 reference on odd sizes, many rows threaded", "[rmsnorm]") {
  const int64_t dim = GENERATE(1, 17, 64, 771);
  const int64_t rows = GENERATE(1, 3, 33);
  std::mt19937 rng(static_cast<uint32_t>(dim * 100 + rows));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(rows * dim), r(rows * dim), w(dim), out(rows * dim);
  for (auto& v : x) v = normal(rng);
  for (auto& v : r) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  const float eps = 1e-5f;
  auto reference = [&](const std::vector<double>& in, int64_t row, int64_t i) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += in[row * dim + j] * in[row * dim + j];
    return in[row * dim + i] / std::sqrt(ss / dim + eps) * w[i];
  };
  llmk::kernels::cpu::rmsnorm(x.data(), w.data(), out.data(), rows, dim, eps);
  const std::vector<double> xd(x.begin(), x.end());
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < dim; ++i) CHECK(out[row * dim + i] == Approx(reference(xd, row, i)).epsilon(1e-5).margin(1e-6));
  std::vector<double> sum(rows * dim);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<double>(r[i]) + x[i];
  llmk::kernels::cpu::add_rmsnorm(r.data(), x.data(), w.data(), out.data(), rows, dim, eps);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < dim; ++i) {
      CHECK(r[row * dim + i] == Approx(sum[row * dim + i]).epsilon(1e-6));
      CHECK(out[row * dim + i] == Approx(reference(sum, row, i)).epsilon(1e-5).margin(1e-6));
    }
}
