#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/linear_rows.hpp"
#include "kernels/cpu/linear_panels64.hpp"
#include "kernels/cpu/linear_bf16_pairs.hpp"
#include "support/skip.hpp"

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

TEST_CASE("matmul_packed equals the float64 product for f16 and bf16 panels, few and many rows", "[matmul]") {
  using namespace llmk::kernels::cpu;
  const int64_t rows = GENERATE(1, 5, 7, 13, 40);
  const int64_t in = GENERATE(3, 300), out = GENERATE(1, 70, 129);
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + in * 31 + out));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y(rows * out);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> w(out * in), packed(packed_panels_size(out, in));
  std::vector<float> scratch(matmul_packed_scratch_floats(2));
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    for (auto& v : w) v = bf16 ? llmk::f32_to_bf16(normal(rng)) : llmk::f32_to_f16(normal(rng));
    pack_panels(w.data(), packed.data(), out, in);
    REQUIRE(matmul_packed(x.data(), packed.data(), bf16 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F16, y.data(), rows, in, out, 2,
                          scratch.data()));
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < out; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < in; ++k) {
          const double wv = bf16 ? llmk::bf16_to_f32(w[n * in + k]) : llmk::f16_to_f32(w[n * in + k]);
          ref += x[m * in + k] * wv;
          mag += std::fabs(x[m * in + k] * wv);
        }
        CHECK(std::fabs(y[m * out + n] - ref) <= 1e-6 * mag);
      }
  }
}

namespace {

// matmul_pairs over random x and BF16 weights against float64: `round`
// selects the BF16 dot-product path (activations rounded to BF16).
void check_matmul_pairs(int64_t rows, int64_t in, int64_t out, bool round) {
  using namespace llmk::kernels::cpu;
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + in * 31 + out));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y(rows * out, NAN);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> w(out * in), packed(packed_pairs_size(out, in));
  for (auto& v : w) v = llmk::f32_to_bf16(normal(rng));
  pack_pairs(w.data(), packed.data(), out, in);
  std::vector<uint16_t> x_bf16(rows * bf16_row_stride(in));
  matmul_pairs(x.data(), packed.data(), y.data(), rows, in, out, 2, round, x_bf16.data());
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t n = 0; n < out; ++n) {
      // Exact: x as given. Rounded: the exact products of the BF16-rounded
      // operands. Either way only the F32 sums differ from float64.
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double xv = round ? llmk::bf16_to_f32(llmk::f32_to_bf16(x[m * in + k])) : x[m * in + k];
        const double p = xv * llmk::bf16_to_f32(w[n * in + k]);
        ref += p;
        mag += std::fabs(p);
      }
      CAPTURE(round, m, n);
      CHECK(std::fabs(y[m * out + n] - ref) <= 1e-6 * mag);
    }
}

}  // namespace

TEST_CASE("matmul_pairs is exact over k-pair BF16 panels", "[matmul][bf16]") {
  const int64_t rows = GENERATE(1, 2, 5, 6, 13, 64);
  // Odd depths (a last step paired with zero), depths across the 256-step
  // blocks, widths that leave a partial last panel.
  const int64_t in = GENERATE(1, 3, 256, 300, 515), out = GENERATE(1, 70, 129);
  check_matmul_pairs(rows, in, out, false);
}

TEST_CASE("matmul_pairs on the BF16 dot-product units is exact for BF16-rounded activations", "[matmul][bf16]") {
  if (!llmk::kernels::cpu::have_bf16_dot()) LLMK_SKIP("this build or CPU has no AVX512-BF16 dot products");
  const int64_t rows = GENERATE(1, 2, 5, 6, 13, 64);
  const int64_t in = GENERATE(1, 3, 256, 300, 515), out = GENERATE(1, 70, 129);
  check_matmul_pairs(rows, in, out, true);
}
