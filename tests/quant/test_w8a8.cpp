// W8A8: the per-channel weight quantizer, the per-row activation quantizer
// and the GEMV/GEMM (VNNI, AVX2 or portable) against float64 references and
// exact integer sums, with error bounds derived from the scheme.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/cpu/linear_w8a8.hpp"
#include "quant/quant_test_util.hpp"

using namespace llmk::kernels::cpu;
using llmk::test::kF32Eps;

namespace {

struct Shape {
  int64_t rows, in, out;
};

const Shape kShapes[] = {{1, 1, 1},    {1, 13, 17},  {3, 67, 33},   {1, 130, 70}, {5, 64, 64},
                         {7, 301, 49}, {32, 172, 64}, {17, 64, 172}, {1, 768, 100}, {4, 5, 300}};

struct PackedW8 {
  llmk::test::AlignedBuffer<int8_t> packed;
  std::vector<float> scale;
  std::vector<int32_t> row_sum;
};

PackedW8 pack(const std::vector<float>& w, int64_t out, int64_t in) {
  PackedW8 p{llmk::test::aligned_buffer<int8_t>(w8a8_size(out, in)),
             std::vector<float>(static_cast<size_t>(num_panels16(out) * 16)),
             std::vector<int32_t>(static_cast<size_t>(num_panels16(out) * 16))};
  pack_w8a8(w.data(), out, in, p.packed.get(), p.scale.data(), p.row_sum.data());
  return p;
}

}  // namespace

TEST_CASE("W8A8 weight quantization stays within half a step of each weight", "[quant][w8a8]") {
  for (const Shape& s : kShapes) {
    const auto w = llmk::test::random_matrix(s.out, s.in, 11, s.out > 2 ? 1 : -1);
    const PackedW8 p = pack(w, s.out, s.in);
    for (int64_t n = 0; n < num_panels16(s.out) * 16; ++n) {
      int64_t sum = 0;
      double amax = 0.0;
      for (int64_t k = 0; k < w8a8_k_pad(s.in); ++k) {
        const int q = w8a8_packed_at(p.packed.get(), s.in, n, k);
        if (n >= s.out || k >= s.in) {
          REQUIRE(q == 0);  // padding contributes nothing
          continue;
        }
        REQUIRE(std::abs(q) <= 127);
        const double wv = w[static_cast<size_t>(n * s.in + k)];
        amax = std::max(amax, std::fabs(wv));
        REQUIRE(std::fabs(wv - q * static_cast<double>(p.scale[n])) <= p.scale[n] * (0.5 + 1e-5));
        sum += q;
      }
      REQUIRE(p.row_sum[n] == sum);
      if (n < s.out) REQUIRE(p.scale[n] == Approx(amax / 127.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("Activation rows quantize to u8 with a +128 shift within half a step", "[quant][w8a8]") {
  for (const int64_t in : {1, 3, 16, 17, 67, 301}) {
    const int64_t rows = 5;
    const auto x = llmk::test::random_matrix(rows, in, 7, 2);
    const int64_t k_pad = w8a8_k_pad(in);
    std::vector<uint8_t> xq(static_cast<size_t>(rows * k_pad));
    std::vector<float> xs(rows);
    quantize_rows_u8(x.data(), rows, in, xq.data(), xs.data());
    for (int64_t r = 0; r < rows; ++r) {
      double amax = 0.0;
      for (int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(double(x[r * in + k])));
      REQUIRE(xs[r] == Approx(amax / 127.0).epsilon(1e-6));
      for (int64_t k = 0; k < k_pad; ++k) {
        const int q = xq[r * k_pad + k] - 128;
        if (k >= in) {
          REQUIRE(q == 0);
          continue;
        }
        REQUIRE(std::abs(q) <= 127);
        REQUIRE(std::fabs(x[r * in + k] - q * double(xs[r])) <= xs[r] * (0.5 + 1e-5));
      }
    }
  }
}

TEST_CASE("W8A8 GEMV and GEMM match float64 within the derived quantization bound", "[quant][w8a8]") {
  for (const Shape& s : kShapes) {
    for (const int threads : {1, 2}) {
      CAPTURE(s.rows, s.in, s.out, threads);
      const auto w = llmk::test::random_matrix(s.out, s.in, 21, s.out > 3 ? 2 : -1);
      const auto x = llmk::test::random_matrix(s.rows, s.in, 22, s.rows > 2 ? 1 : -1);
      const PackedW8 p = pack(w, s.out, s.in);
      auto scratch = llmk::test::aligned_buffer<uint8_t>(w8a8_scratch_size(s.rows, s.in));
      std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
      linear_w8a8(x.data(), s.rows, s.in, p.packed.get(), p.scale.data(), p.row_sum.data(), s.out, y.data(),
                  scratch.get(), threads);
      for (int64_t r = 0; r < s.rows; ++r) {
        double amax = 0.0;
        for (int64_t k = 0; k < s.in; ++k) amax = std::max(amax, std::fabs(double(x[r * s.in + k])));
        const double sx = amax / 127.0;
        for (int64_t n = 0; n < s.out; ++n) {
          const double sw = p.scale[n];
          double ref = 0.0, bound = 0.0, mag = 0.0;
          for (int64_t k = 0; k < s.in; ++k) {
            const double xv = x[r * s.in + k], wv = w[n * s.in + k];
            ref += xv * wv;
            // x^ w^ - x w = x^ (w^ - w) + w (x^ - x), |x^| <= |x| + sx/2.
            bound += std::fabs(xv) * sw / 2 + std::fabs(wv) * sx / 2 + sx * sw / 4;
            mag += (std::fabs(xv) + sx) * (std::fabs(wv) + sw);
          }
          // Float epilogue (int32 -> f32, two products) and f32 scales: a few ulps of the magnitude.
          bound += 8 * kF32Eps * mag + 1e-30;
          REQUIRE(std::fabs(y[r * s.out + n] - ref) <= bound);
        }
      }
    }
  }
}

TEST_CASE("W8A8 output equals the exact integer dot product times both scales", "[quant][w8a8]") {
  const Shape s{6, 203, 37};
  const auto w = llmk::test::random_matrix(s.out, s.in, 31);
  const auto x = llmk::test::random_matrix(s.rows, s.in, 32);
  const PackedW8 p = pack(w, s.out, s.in);
  const int64_t k_pad = w8a8_k_pad(s.in);
  std::vector<uint8_t> xq(static_cast<size_t>(s.rows * k_pad));
  std::vector<float> xs(s.rows);
  quantize_rows_u8(x.data(), s.rows, s.in, xq.data(), xs.data());
  auto scratch = llmk::test::aligned_buffer<uint8_t>(w8a8_scratch_size(s.rows, s.in));
  std::vector<float> y(static_cast<size_t>(s.rows * s.out));
  linear_w8a8(x.data(), s.rows, s.in, p.packed.get(), p.scale.data(), p.row_sum.data(), s.out, y.data(),
              scratch.get(), 2);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t n = 0; n < s.out; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < s.in; ++k) acc += int64_t(xq[r * k_pad + k] - 128) * w8a8_packed_at(p.packed.get(), s.in, n, k);
      const double ref = double(acc) * xs[r] * p.scale[n];
      REQUIRE(y[r * s.out + n] == Approx(ref).epsilon(4 * kF32Eps).margin(1e-30));
    }
}

TEST_CASE("W8A8 stays exact with every weight and activation at +-127, where u8 x s8 pair sums exceed int16",
          "[quant][w8a8]") {
  // All-equal magnitudes quantize to exactly +-127; the products of a pair of
  // k then reach 2 * 127 * 127 (signed) or 2 * 255 * 127 (with the +128
  // shift), past what a saturating int16 pair sum holds.
  const Shape s{3, 67, 33};
  std::vector<float> w(static_cast<size_t>(s.out * s.in)), x(static_cast<size_t>(s.rows * s.in));
  for (int64_t n = 0; n < s.out; ++n)
    for (int64_t k = 0; k < s.in; ++k) w[n * s.in + k] = (n % 3 == 0 || (n + k) % 5 == 0) ? 0.5f : -0.5f;
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t k = 0; k < s.in; ++k) x[r * s.in + k] = r == 0 ? 2.0f : r == 1 ? -2.0f : ((k % 5 == 0) ? 2.0f : -2.0f);
  const PackedW8 p = pack(w, s.out, s.in);
  const int64_t k_pad = w8a8_k_pad(s.in);
  std::vector<uint8_t> xq(static_cast<size_t>(s.rows * k_pad));
  std::vector<float> xs(s.rows);
  quantize_rows_u8(x.data(), s.rows, s.in, xq.data(), xs.data());
  auto scratch = llmk::test::aligned_buffer<uint8_t>(w8a8_scratch_size(s.rows, s.in));
  std::vector<float> y(static_cast<size_t>(s.rows * s.out));
  linear_w8a8(x.data(), s.rows, s.in, p.packed.get(), p.scale.data(), p.row_sum.data(), s.out, y.data(),
              scratch.get(), 1);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t n = 0; n < s.out; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < s.in; ++k) {
        const int qx = xq[r * k_pad + k] - 128, qw = w8a8_packed_at(p.packed.get(), s.in, n, k);
        REQUIRE(std::abs(qx) == 127);
        REQUIRE(std::abs(qw) == 127);
        acc += int64_t(qx) * qw;
      }
      // The integer sum is exact in every path, so the output is this float expression bit for bit.
      CAPTURE(r, n, acc);
      REQUIRE(y[r * s.out + n] == static_cast<float>(acc) * (p.scale[n] * xs[r]));
    }
}
