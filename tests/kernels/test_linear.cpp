#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/linear_bf16_pairs.hpp"
#include "kernels/cpu/linear_panels16.hpp"
#include "kernels/cpu/linear_panels64.hpp"
#include "kernels/cpu/linear_rows.hpp"
#include "support/skip.hpp"

TEST_CASE("linear_rows equals the float64 product for 1 to 6 rows and odd sizes", "[linear]") {
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
    REQUIRE(llmk::kernels::cpu::linear_rows(x.data(), rows, in, bf16 ? static_cast<const void*>(wb.data()) : w.data(),
                                            bf16 ? LLMK_DTYPE_BF16 : LLMK_DTYPE_F32, out, y.data(), 2));
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

TEST_CASE("linear_panels64 equals the float64 product for f32, f16 and bf16 panels, few and many rows", "[linear]") {
  using namespace llmk::kernels::cpu;
  // Every register-tile height (tiles of at most 6 rows, as even as they go:
  // 7 rows as 4 + 3, 13 as 5 + 4 + 4, 40 as five 6s and two 5s; one or two
  // rows alone stream); from 12 rows on, blocks are repacked (widened) once
  // and shared by the row tiles; 300 inputs span a whole 256-step block and
  // a partial one, 530 two and a partial.
  const int64_t rows = GENERATE(1, 2, 3, 5, 7, 13, 14, 15, 16, 17, 40);
  const int64_t in = GENERATE(3, 300, 530), out = GENERATE(1, 70, 129);
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + in * 31 + out));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y(rows * out);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> w(out * in), packed(panels64_size(out, in));
  std::vector<float> w32(out * in), packed32(panels64_size(out, in));
  std::vector<float> scratch(panels64_scratch_size(2));
  for (const llmk_dtype dt : {LLMK_DTYPE_F32, LLMK_DTYPE_F16, LLMK_DTYPE_BF16}) {
    CAPTURE(rows, in, out, static_cast<int>(dt));
    for (int64_t i = 0; i < out * in; ++i) {
      const float v = normal(rng);
      w[i] = dt == LLMK_DTYPE_BF16 ? llmk::f32_to_bf16(v) : llmk::f32_to_f16(v);
      w32[i] = v;
    }
    auto weight = [&](int64_t i) -> double {
      if (dt == LLMK_DTYPE_F32) return w32[i];
      return dt == LLMK_DTYPE_BF16 ? llmk::bf16_to_f32(w[i]) : llmk::f16_to_f32(w[i]);
    };
    std::fill(y.begin(), y.end(), NAN);
    if (dt == LLMK_DTYPE_F32) {
      pack_panels64(w32.data(), out, in, packed32.data());
      REQUIRE(linear_panels64(x.data(), rows, in, packed32.data(), dt, out, y.data(), scratch.data(), 2));
    } else {
      pack_panels64(w.data(), out, in, packed.data());
      REQUIRE(linear_panels64(x.data(), rows, in, packed.data(), dt, out, y.data(), scratch.data(), 2));
    }
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < out; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < in; ++k) {
          ref += x[m * in + k] * weight(n * in + k);
          mag += std::fabs(x[m * in + k] * weight(n * in + k));
        }
        CHECK(std::fabs(y[m * out + n] - ref) <= 1e-6 * mag);
      }
  }
}

TEST_CASE("linear_panels64 gives a row the same bits alone and among other rows", "[linear]") {
  // Decode (one or two rows, streamed) and many-row tiles (at most 6 rows
  // each, as even as they go: 32 rows as 6, 6, 5, 5, 5, 5) take different
  // loops; each output must sum the same products in the same order.
  using namespace llmk::kernels::cpu;
  const int64_t in = GENERATE(3, 300, 768), out = GENERATE(70, 192);
  const int64_t rows = GENERATE(7, 13, 14, 32, 40);
  std::mt19937 rng(static_cast<uint32_t>(in * 131 + out + rows));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y_all(rows * out), y_one(out);
  for (auto& v : x) v = normal(rng);
  std::vector<float> w(out * in), packed(panels64_size(out, in)), scratch(panels64_scratch_size(2));
  for (auto& v : w) v = normal(rng);
  pack_panels64(w.data(), out, in, packed.data());
  REQUIRE(linear_panels64(x.data(), rows, in, packed.data(), LLMK_DTYPE_F32, out, y_all.data(), scratch.data(), 2));
  for (int64_t m = 0; m < rows; ++m) {
    REQUIRE(linear_panels64(x.data() + m * in, 1, in, packed.data(), LLMK_DTYPE_F32, out, y_one.data(), scratch.data(),
                            2));
    CAPTURE(in, out, rows, m);
    CHECK(std::memcmp(y_one.data(), y_all.data() + m * out, out * sizeof(float)) == 0);
  }
}

namespace {

// linear_bf16_pairs over random x and BF16 weights against float64: `round`
// selects the BF16 dot-product path (activations rounded to BF16).
void check_linear_bf16_pairs(int64_t rows, int64_t in, int64_t out, bool round) {
  using namespace llmk::kernels::cpu;
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + in * 31 + out));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y(rows * out, NAN);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> w(out * in), packed(bf16_pairs_size(out, in));
  for (auto& v : w) v = llmk::f32_to_bf16(normal(rng));
  pack_bf16_pairs(w.data(), out, in, packed.data());
  std::vector<uint16_t> x_bf16(bf16_pairs_scratch_size(rows, in));
  linear_bf16_pairs(x.data(), rows, in, packed.data(), round, out, y.data(), x_bf16.data(), 2);
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

TEST_CASE("linear_bf16_pairs is exact over k-pair BF16 panels", "[linear][bf16]") {
  // 7, 8, 13, 14: the last tile of 6 rows and one or two more run as 4 + 3 or 4 + 4.
  const int64_t rows = GENERATE(1, 2, 5, 6, 7, 8, 13, 14, 64);
  // Odd depths (a last step paired with zero), depths across the 256-step
  // blocks, widths that leave a partial last panel.
  const int64_t in = GENERATE(1, 3, 256, 300, 515), out = GENERATE(1, 70, 129);
  check_linear_bf16_pairs(rows, in, out, false);
}

TEST_CASE("linear_bf16_pairs gives a row the same bits alone and among other rows (exact path)", "[linear][bf16]") {
  // Decode (one row) and prefill or batched steps (row tiles) take different
  // loops; each output must still sum the same products in the same order.
  using namespace llmk::kernels::cpu;
  const int64_t in = GENERATE(3, 300, 768), out = GENERATE(70, 192);
  const int64_t rows = GENERATE(13, 14);
  std::mt19937 rng(static_cast<uint32_t>(in * 131 + out));
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), y_all(rows * out), y_one(out);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> w(out * in), packed(bf16_pairs_size(out, in));
  for (auto& v : w) v = llmk::f32_to_bf16(normal(rng));
  pack_bf16_pairs(w.data(), out, in, packed.data());
  std::vector<uint16_t> x_bf16(bf16_pairs_scratch_size(rows, in));
  linear_bf16_pairs(x.data(), rows, in, packed.data(), false, out, y_all.data(), x_bf16.data(), 2);
  for (int64_t m = 0; m < rows; ++m) {
    linear_bf16_pairs(x.data() + m * in, 1, in, packed.data(), false, out, y_one.data(), x_bf16.data(), 2);
    CAPTURE(in, out, m);
    CHECK(std::memcmp(y_one.data(), y_all.data() + m * out, out * sizeof(float)) == 0);
  }
}

TEST_CASE("linear_bf16_pairs on the BF16 dot-product units is exact for BF16-rounded activations", "[linear][bf16]") {
  if (!llmk::kernels::cpu::have_bf16_dot()) LLMK_SKIP("this build or CPU has no AVX512-BF16 dot products");
  const int64_t rows = GENERATE(1, 2, 5, 6, 13, 64);
  const int64_t in = GENERATE(1, 3, 256, 300, 515), out = GENERATE(1, 70, 129);
  check_linear_bf16_pairs(rows, in, out, true);
}

TEST_CASE("pack_panels16 places w[n, k] at [n / 16][k][n % 16], pack_panels64 where panels64_offset says, and "
          "both zero the rest",
          "[linear]") {
  using namespace llmk::kernels::cpu;
  const int64_t in = GENERATE(1, 7, 33, 300, 530), out = GENERATE(1, 16, 19, 64, 70);
  std::vector<float> w(out * in);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);  // every weight distinct and nonzero
  std::vector<uint16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = static_cast<uint16_t>(i + 1);
  for (const int64_t width : {kPanels16Width, kPanels64Width}) {
    const size_t size = width == 16 ? panels16_size(out, in) : panels64_size(out, in);
    REQUIRE(size == static_cast<size_t>((out + width - 1) / width * width * in));
    std::vector<float> packed(size, -1.0f);
    std::vector<uint16_t> packed16(size, 0xffff);
    if (width == 16) {
      pack_panels16(w.data(), out, in, packed.data());
      pack_panels16(w16.data(), out, in, packed16.data());
    } else {
      pack_panels64(w.data(), out, in, packed.data());
      pack_panels64(w16.data(), out, in, packed16.data());
    }
    std::vector<int> hits(size, 0);  // every element of the packed form is some w[n, k]'s, once
    for (int64_t n = 0; n < static_cast<int64_t>(size / in); ++n)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t offset = width == 16 ? ((n / width) * in + k) * width + n % width : panels64_offset(n, k, in);
        CAPTURE(width, n, k);
        REQUIRE(offset >= 0);
        REQUIRE(offset < static_cast<int64_t>(size));
        const auto at = static_cast<size_t>(offset);
        ++hits[at];
        // Within a panel, a channel's k steps keep their order (a k step's
        // elements never lie past the next one's in the same channel).
        if (k > 0 && width == 64) CHECK(panels64_offset(n, k - 1, in) < offset);
        CHECK(packed[at] == (n < out ? w[n * in + k] : 0.0f));
        CHECK(packed16[at] == (n < out ? w16[n * in + k] : 0));
      }
    CHECK(std::count(hits.begin(), hits.end(), 1) == static_cast<long>(size));
  }
}

TEST_CASE("The linear kernels that take a weight dtype refuse one they do not serve and leave y alone",
          "[linear]") {
  using namespace llmk::kernels::cpu;
  const int64_t rows = 2, in = 5, out = 3;
  std::vector<float> x(rows * in, 1.0f), w(panels64_size(out, in), 1.0f), scratch(panels64_scratch_size(1));
  for (const llmk_dtype bad : {LLMK_DTYPE_I8, LLMK_DTYPE_U8, LLMK_DTYPE_I32}) {
    std::vector<float> y(rows * out, -7.0f);
    CAPTURE(static_cast<int>(bad));
    CHECK_FALSE(linear_rows(x.data(), rows, in, w.data(), bad, out, y.data(), 1));
    CHECK_FALSE(linear_panels64(x.data(), rows, in, w.data(), bad, out, y.data(), scratch.data(), 1));
    CHECK_FALSE(linear_panels16(x.data(), rows, in, w.data(), bad, out, y.data(), 1));
    for (const float v : y) CHECK(v == -7.0f);
  }
}
