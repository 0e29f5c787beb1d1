#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/matmul.hpp"

TEST_CASE("matmul_wt equals the float64 product for 1 to 6 rows and odd sizes", "[matmul]") {
  const int64_t rows = GENERATE(1, 2, 3, 4, 6);
  const int64_t in = GENERATE(1, 16, 33, 515), out = 19;
  std::mt19937 rng(static_cast<uint32_t>(rows * 1000 + in));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), w(out * in), y(rows * out);
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = llmk::f32_to_bf16(w[i]);
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    REQUIRE(llmk::kernels::cpu::matmul_wt(x.data(), bf16 ? static_cast<const void*>(wb.data()) : w.data(),
                                          bf16 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F32, y.data(), rows, in, out, 2));
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < out; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < in; ++k) {
          const double wv = bf16 ? llmk::bf16_to_f32(wb[n * in + k]) : w[n * in + k];
          ref += x[m * in + k] * wv;
          mag += std::fabs(x[m * in + k] * wv);
        }
        CHECK(std::fabs(y[m * out + n] - ref) <= 1e-6 * mag);
      }
  }
}
