// Weight-only schemes (int4 groups, uint8 zero point) and the f32 panel GEMM
// against float64 references. Activations stay f32, so a layer's error is
// exactly sum_k x_k (w_k - deq(w_k)) plus f32 rounding:
// |y - y_ref| <= sum_k |x_k| |w_k - deq(w_k)| + rounding, where
// |w_k - deq(w_k)| <= scale(k) / 2 for every weight inside its group's range
// (all of them under min/max ranges and the uint8 scheme).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/linear_panels16.hpp"
#include "kernels/cpu/linear_w4.hpp"
#include "kernels/cpu/linear_w4_tiles.hpp"
#include "kernels/cpu/linear_wu8.hpp"
#include "quant/quant_test_util.hpp"
#include "support/skip.hpp"

using namespace llmk::kernels::cpu;
using llmk::test::kF32Eps;

namespace {

struct Shape {
  int64_t rows, in, out;
};

const Shape kShapes[] = {{1, 1, 1},     {1, 13, 17},  {3, 67, 33},  {1, 130, 70},  {5, 64, 64},
                         {7, 301, 49},  {32, 172, 64}, {17, 64, 172}, {1, 768, 100}, {2, 5, 300},
                         {1, 1000, 20}, {9, 264, 31}};

// Rounding allowance of an f32 dot product of length k over terms of total magnitude mag.
double rounding(int64_t k, double mag) { return 2.0 * double(k + 4) * kF32Eps * mag + 1e-30; }

}  // namespace

namespace {

// Float64 reference of the min/max range of one group: scale and zero point
// as linear_w4.hpp defines them (the scale rounded to its stored f32).
std::pair<double, double> min_max_params(const float* w, int64_t n) {
  double lo = 0.0, hi = 0.0;
  for (int64_t k = 0; k < n; ++k) lo = std::min(lo, double(w[k])), hi = std::max(hi, double(w[k]));
  const double sc = float((hi - lo) / 15.0);
  return {sc, sc > 0.0 ? std::clamp(std::nearbyint(-lo / sc), 0.0, 15.0) : 0.0};
}

double sq_error(const float* w, int64_t n, double sc, double z) {
  double err = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const double q = sc > 0.0 ? std::clamp(std::nearbyint(w[k] / sc) + z, 0.0, 15.0) : z;
    err += (w[k] - (q - z) * sc) * (w[k] - (q - z) * sc);
  }
  return err;
}

// A weight packed by pack_w4: its words, group scales and zero points.
struct PackedW4 {
  std::vector<uint32_t> packed;
  std::vector<float> scale;
  std::vector<uint8_t> zero;
};

PackedW4 pack_w4_test(const std::vector<float>& w, const W4Shape& ws, W4Range range = W4Range::mse) {
  PackedW4 q{std::vector<uint32_t>(w4_size(ws)), std::vector<float>(ws.group_params()),
             std::vector<uint8_t>(ws.group_params())};
  pack_w4(w.data(), ws, q.packed.data(), q.scale.data(), q.zero.data(), range);
  return q;
}

// Dequantized weight (n, k) from the packed format.
double w4_deq(const std::vector<uint32_t>& packed, const std::vector<float>& scale, const std::vector<uint8_t>& zero,
              const W4Shape& ws, int64_t n, int64_t k) {
  const int64_t at = w4_param_index(ws, n, k / ws.group_size);
  return (int(w4_q_at(packed.data(), ws, n, k)) - zero[at]) * double(scale[at]);
}

}  // namespace

TEST_CASE("Int4 group quantization keeps zero exact and rounds each weight to its group's nearest level",
          "[quant][int4]") {
  for (const W4Range range : {W4Range::min_max, W4Range::mse}) {
    for (const int64_t gs : {8, 32, 128}) {
      for (const Shape& s : kShapes) {
        const W4Shape ws{s.in, s.out, std::min(gs, s.in)};
        if (!ws.valid()) continue;
        CAPTURE(s.in, s.out, ws.group_size, range == W4Range::mse);
        auto w = llmk::test::random_matrix(s.out, s.in, 41, s.out > 2 ? 1 : -1);
        if (s.out > 3) std::fill_n(w.begin() + 3 * s.in, s.in, 0.25f);  // constant positive channel
        const auto [packed, scale, zero] = pack_w4_test(w, ws, range);
        for (int64_t n = 0; n < s.out; ++n)
          for (int64_t g = 0; g < ws.num_groups(); ++g) {
            const int64_t k0 = g * ws.group_size, k1 = std::min(s.in, k0 + ws.group_size);
            const float* gw = w.data() + n * s.in + k0;
            const int64_t at = w4_param_index(ws, n, g);
            const double sc = scale[at], z = zero[at];
            REQUIRE(zero[at] <= 15);
            const auto [sc0, z0] = min_max_params(gw, k1 - k0);
            if (range == W4Range::min_max) {
              REQUIRE(sc == sc0);
              REQUIRE(z == z0);
            } else {
              // A shrunk min/max range, never worse than the full one.
              REQUIRE(sc <= sc0 * (1.0 + 1e-6));
              REQUIRE(sc >= sc0 * (0.75 - 1e-6));
              REQUIRE(sq_error(gw, k1 - k0, sc, z) <= sq_error(gw, k1 - k0, sc0, z0) * (1.0 + 1e-5) + 1e-30);
            }
            for (int64_t k = k0; k < k1; ++k) {
              const double wv = w[n * s.in + k], deq = w4_deq(packed, scale, zero, ws, n, k);
              // The nearest of the 16 levels (q - z) * sc; within half a step inside the range.
              double nearest = std::fabs(wv + z * sc);
              for (int q = 1; q < 16; ++q) nearest = std::min(nearest, std::fabs(wv - (q - z) * sc));
              REQUIRE(std::fabs(wv - deq) <= nearest + sc * 1e-5);
              if (wv >= -z * sc && wv <= (15 - z) * sc) REQUIRE(std::fabs(wv - deq) <= sc * (0.5 + 1e-5));
              if (range == W4Range::min_max) REQUIRE(std::fabs(wv - deq) <= sc * (0.5 + 1e-5));
              if (wv == 0.0) REQUIRE(deq == 0.0);
            }
          }
      }
    }
  }
}

TEST_CASE("Int4 MSE ranges lower the squared error of heavy-tailed groups", "[quant][int4]") {
  // Gaussian weights with outliers: clipping the largest buys a finer step
  // for the rest. Summed over many groups, the error must drop clearly.
  const W4Shape ws{256, 64, 64};
  const auto w = llmk::test::random_matrix(ws.out_features, ws.in_features, 61);
  double err_min_max = 0.0, err_mse = 0.0;
  for (const W4Range range : {W4Range::min_max, W4Range::mse}) {
    const auto [packed, scale, zero] = pack_w4_test(w, ws, range);
    double err = 0.0;
    for (int64_t n = 0; n < ws.out_features; ++n)
      for (int64_t k = 0; k < ws.in_features; ++k) {
        const double d = w[n * ws.in_features + k] - w4_deq(packed, scale, zero, ws, n, k);
        err += d * d;
      }
    (range == W4Range::mse ? err_mse : err_min_max) = err;
  }
  CAPTURE(err_min_max, err_mse);
  REQUIRE(err_mse < 0.95 * err_min_max);
}

TEST_CASE("Int4 GEMV and GEMM match float64 within the weights' quantization error", "[quant][int4]") {
  for (const W4Range range : {W4Range::min_max, W4Range::mse}) {
    for (const int64_t gs : {8, 32, 128}) {
      for (const Shape& s : kShapes) {
        const W4Shape ws{s.in, s.out, std::min(gs, s.in)};
        if (!ws.valid()) continue;
        const auto w = llmk::test::random_matrix(s.out, s.in, 51);
        const auto x = llmk::test::random_matrix(s.rows, s.in, 52, s.rows > 2 ? 1 : -1);
        const auto [packed, scale, zero] = pack_w4_test(w, ws, range);
        for (const int threads : {1, 2}) {
          CAPTURE(s.rows, s.in, s.out, ws.group_size, threads, range == W4Range::mse);
          std::vector<float> scratch(w4_scratch_size(ws, threads));
          std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
          linear_w4(x.data(), s.rows, ws, packed.data(), scale.data(), zero.data(), y.data(), scratch.data(), threads);
          for (int64_t r = 0; r < s.rows; ++r)
            for (int64_t n = 0; n < s.out; ++n) {
              double ref = 0.0, bound = 0.0, mag = 0.0;
              for (int64_t k = 0; k < s.in; ++k) {
                const double xv = x[r * s.in + k], wv = w[n * s.in + k];
                const double deq = w4_deq(packed, scale, zero, ws, n, k);
                const int64_t at = w4_param_index(ws, n, k / ws.group_size);
                ref += xv * wv;
                // Exactly the weight's own error (at most scale / 2 for min_max ranges).
                bound += std::fabs(xv) * std::fabs(wv - deq);
                // The one-row kernel sums raw q * x and subtracts zero * sum(x): its rounding scales with those.
                mag += std::fabs(xv) * (std::fabs(wv) + 32.0 * scale[at]);
              }
              REQUIRE(std::fabs(y[r * s.out + n] - ref) <= bound + rounding(s.in, mag));
            }
        }
      }
    }
  }
}

TEST_CASE("Int4 with int8 activations is within their rounding of the dequantized product, alone or among rows",
          "[quant][int4]") {
  // W4Activations::int8 rounds each group of x to the nearest of 255 levels
  // (step sx = absmax / 127) and sums the products exactly: against float64
  // over the dequantized weights, the error is at most |deq(w)| * sx / 2 per
  // term plus f32 rounding.
  for (const int64_t gs : {8, 32, 128}) {
    for (const Shape& s : kShapes) {
      const W4Shape ws{s.in, s.out, std::min(gs, s.in)};
      if (!ws.valid()) continue;
      const auto w = llmk::test::random_matrix(s.out, s.in, 71);
      const auto x = llmk::test::random_matrix(s.rows, s.in, 72, s.rows > 2 ? 1 : -1);
      const auto [packed, scale, zero] = pack_w4_test(w, ws);
      for (const int threads : {1, 2}) {
        std::vector<float> scratch(w4_scratch_size(ws, threads, s.rows, W4Activations::int8));
        std::vector<float> y(static_cast<size_t>(s.out), -1.0f), y_all(static_cast<size_t>(s.rows * s.out), -1.0f);
        // All rows in one call (prefill's row tiles), then each alone (decode): the same bits.
        linear_w4(x.data(), s.rows, ws, packed.data(), scale.data(), zero.data(), y_all.data(), scratch.data(), threads,
                  W4Activations::int8);
        for (int64_t r = 0; r < s.rows; ++r) {
          const float* xr = x.data() + r * s.in;
          linear_w4(xr, 1, ws, packed.data(), scale.data(), zero.data(), y.data(), scratch.data(), threads,
                    W4Activations::int8);
          REQUIRE(std::equal(y.begin(), y.end(), y_all.begin() + r * s.out));
          for (int64_t n = 0; n < s.out; ++n) {
            double ref = 0.0, bound = 0.0, mag = 0.0;
            for (int64_t g = 0; g < ws.num_groups(); ++g) {
              const int64_t k0 = g * ws.group_size, k1 = std::min(s.in, k0 + ws.group_size);
              double amax = 0.0;
              for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(double(xr[k])));
              const double step = amax / 127.0;
              const int64_t at = w4_param_index(ws, n, g);
              for (int64_t k = k0; k < k1; ++k) {
                const double deq = w4_deq(packed, scale, zero, ws, n, k);
                ref += deq * xr[k];
                bound += std::fabs(deq) * step * (0.5 + 1e-4);
                mag += (std::fabs(deq) + 16.0 * scale[at]) * (std::fabs(xr[k]) + step);
              }
            }
            CAPTURE(s.in, s.out, ws.group_size, threads, r, n);
            REQUIRE(std::fabs(y[n] - ref) <= bound + rounding(s.in, mag));
          }
        }
      }
    }
  }
}

TEST_CASE("Int4 with int8 activations sums exactly the integers its definition rounds x to", "[quant][int4]") {
  // The activations' rounding as the plugin defines it, in f32: per group,
  // inv = 127 / absmax and xq = nearbyint(x * inv); the kernels then sum
  // q_w * xq and xq exactly in integers, so the only error left is the f32
  // epilogue's (scale * sx, one multiply-add per group). An activation lost,
  // moved or rounded the other way shows as a whole q_w * sx, far above it.
  // Inputs include exact ties (x * inv = n + 0.5, rounded to even) and zeros.
  for (const int64_t gs : {8, 32, 128}) {
    for (const Shape& s : kShapes) {
      const W4Shape ws{s.in, s.out, std::min(gs, s.in)};
      if (!ws.valid()) continue;
      const auto w = llmk::test::random_matrix(s.out, s.in, 81);
      auto x = llmk::test::random_matrix(s.rows, s.in, 82, s.rows > 2 ? 1 : -1);
      for (int64_t i = 0; i < static_cast<int64_t>(x.size()); i += 7) x[i] = 0.0f;
      // Ties: in a group whose absmax is 127, x * inv is x itself.
      if (s.in >= 3) x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f;
      const auto [packed, scale, zero] = pack_w4_test(w, ws);
      for (const int threads : {1, 2}) {
        std::vector<float> scratch(w4_scratch_size(ws, threads, s.rows, W4Activations::int8));
        std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
        linear_w4(x.data(), s.rows, ws, packed.data(), scale.data(), zero.data(), y.data(), scratch.data(), threads,
                  W4Activations::int8);
        for (int64_t r = 0; r < s.rows; ++r) {
          const float* xr = x.data() + r * s.in;
          for (int64_t n = 0; n < s.out; ++n) {
            double ref = 0.0, mag = 0.0;
            for (int64_t g = 0; g < ws.num_groups(); ++g) {
              const int64_t k0 = g * ws.group_size, k1 = std::min(s.in, k0 + ws.group_size);
              float amax = 0.0f;
              for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(xr[k]));
              const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
              int64_t dot = 0, xsum = 0;
              for (int64_t k = k0; k < k1; ++k) {
                const auto xq = static_cast<int64_t>(std::nearbyint(xr[k] * inv));
                dot += static_cast<int64_t>(w4_q_at(packed.data(), ws, n, k)) * xq;
                xsum += xq;
              }
              const int64_t at = w4_param_index(ws, n, g);
              const double term =
                  double(scale[at]) * double(amax / 127.0f) * double(dot - int64_t{zero[at]} * xsum);
              ref += term;
              mag += std::fabs(term);
            }
            CAPTURE(s.rows, s.in, s.out, ws.group_size, threads, r, n);
            REQUIRE(std::fabs(y[r * s.out + n] - ref) <= 4.0 * double(ws.num_groups() + 1) * kF32Eps * mag + 1e-30);
          }
        }
      }
    }
  }
}

TEST_CASE("Uint8 zero-point quantization stays within half a step per tensor and per channel", "[quant][uint8_zp]") {
  for (const bool per_channel : {false, true}) {
    for (const Shape& s : kShapes) {
      CAPTURE(s.in, s.out, per_channel);
      auto w = llmk::test::random_matrix(s.out, s.in, 61, s.out > 2 ? 1 : -1);
      std::vector<uint8_t> packed(wu8_size(s.out, s.in));
      std::vector<float> scale(num_panels16(s.out) * 16);
      std::vector<uint8_t> zero(num_panels16(s.out) * 16);
      pack_wu8(w.data(), s.out, s.in, per_channel, packed.data(), scale.data(), zero.data());
      double t_lo = 0.0, t_hi = 0.0;
      for (const float v : w) t_lo = std::min<double>(t_lo, v), t_hi = std::max<double>(t_hi, v);
      for (int64_t n = 0; n < s.out; ++n) {
        if (!per_channel) {
          REQUIRE(scale[n] == Approx((t_hi - t_lo) / 255.0).epsilon(1e-6).margin(1e-30));
          REQUIRE(zero[n] == zero[0]);
        }
        for (int64_t k = 0; k < s.in; ++k) {
          const double deq = (wu8_q_at(packed.data(), s.in, n, k) - zero[n]) * double(scale[n]);
          REQUIRE(std::fabs(w[n * s.in + k] - deq) <= scale[n] * (0.5 + 1e-5));
          if (w[n * s.in + k] == 0.0f) REQUIRE(deq == 0.0);
        }
      }
    }
  }
}

TEST_CASE("Uint8 zero-point GEMV and GEMM match float64 within the scale bound", "[quant][uint8_zp]") {
  for (const bool per_channel : {false, true}) {
    for (const Shape& s : kShapes) {
      for (const int threads : {1, 2}) {
        CAPTURE(s.rows, s.in, s.out, per_channel, threads);
        const auto w = llmk::test::random_matrix(s.out, s.in, 71);
        const auto x = llmk::test::random_matrix(s.rows, s.in, 72, s.rows > 2 ? 1 : -1);
        std::vector<uint8_t> packed(wu8_size(s.out, s.in));
        std::vector<float> scale(num_panels16(s.out) * 16);
        std::vector<uint8_t> zero(num_panels16(s.out) * 16);
        pack_wu8(w.data(), s.out, s.in, per_channel, packed.data(), scale.data(), zero.data());
        std::vector<float> scratch(wu8_scratch_size(s.in, threads));
        std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
        linear_wu8(x.data(), s.rows, s.in, packed.data(), scale.data(), zero.data(), s.out, y.data(), scratch.data(),
                   threads);
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t n = 0; n < s.out; ++n) {
            double ref = 0.0, bound = 0.0, mag = 0.0;
            for (int64_t k = 0; k < s.in; ++k) {
              const double xv = x[r * s.in + k], wv = w[n * s.in + k];
              ref += xv * wv;
              bound += std::fabs(xv) * scale[n] / 2;
              mag += std::fabs(xv) * (std::fabs(wv) + 512.0 * scale[n]);
            }
            REQUIRE(std::fabs(y[r * s.out + n] - ref) <= bound + rounding(s.in, mag));
          }
      }
    }
  }
}

TEST_CASE("F32 panel GEMM matches float64 to f32 rounding", "[quant][f32]") {
  for (const Shape& s : kShapes) {
    for (const int threads : {1, 2}) {
      CAPTURE(s.rows, s.in, s.out, threads);
      const auto w = llmk::test::random_matrix(s.out, s.in, 81);
      const auto x = llmk::test::random_matrix(s.rows, s.in, 82);
      std::vector<float> packed(panels16_size(s.out, s.in));
      pack_panels16(w.data(), s.out, s.in, packed.data());
      std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
      REQUIRE(linear_panels16(x.data(), s.rows, s.in, packed.data(), LLMK_DTYPE_F32, s.out, y.data(), threads));
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t n = 0; n < s.out; ++n) {
          double ref = 0.0, mag = 0.0;
          for (int64_t k = 0; k < s.in; ++k) {
            ref += double(x[r * s.in + k]) * w[n * s.in + k];
            mag += std::fabs(double(x[r * s.in + k]) * w[n * s.in + k]);
          }
          REQUIRE(std::fabs(y[r * s.out + n] - ref) <= rounding(s.in, mag));
        }
    }
  }
}

TEST_CASE("F16 and BF16 panels convert on load and match float64 of the stored weights", "[quant][f32]") {
  for (const auto type : {LLMK_DTYPE_F16, LLMK_DTYPE_BF16}) {
    for (const Shape& s : kShapes) {
      CAPTURE(s.rows, s.in, s.out, type == LLMK_DTYPE_F16);
      const auto w = llmk::test::random_matrix(s.out, s.in, 83);
      const auto x = llmk::test::random_matrix(s.rows, s.in, 84);
      std::vector<uint16_t> bits(w.size());
      std::vector<float> stored(w.size());  // the weights as the 16-bit format holds them
      for (size_t i = 0; i < w.size(); ++i) {
        bits[i] = type == LLMK_DTYPE_F16 ? llmk::f32_to_f16(w[i]) : llmk::f32_to_bf16(w[i]);
        stored[i] = type == LLMK_DTYPE_F16 ? llmk::f16_to_f32(bits[i]) : llmk::bf16_to_f32(bits[i]);
      }
      std::vector<uint16_t> packed(panels16_size(s.out, s.in));
      pack_panels16(bits.data(), s.out, s.in, packed.data());
      std::vector<float> y(static_cast<size_t>(s.rows * s.out), -1.0f);
      REQUIRE(linear_panels16(x.data(), s.rows, s.in, packed.data(), type, s.out, y.data(), 2));
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t n = 0; n < s.out; ++n) {
          double ref = 0.0, mag = 0.0;
          for (int64_t k = 0; k < s.in; ++k) {
            ref += double(x[r * s.in + k]) * stored[n * s.in + k];
            mag += std::fabs(double(x[r * s.in + k]) * stored[n * s.in + k]);
          }
          REQUIRE(std::fabs(y[r * s.out + n] - ref) <= rounding(s.in, mag));
        }
    }
  }
}

namespace {

// Shapes the tile kernel takes (w4_amx_shape): rows in whole 16-row blocks
// and tails, partial last panels, one to eight tiles of 64 inputs a group.
struct TileShape {
  int64_t rows, in, out, group;
};
const TileShape kTileShapes[] = {{2, 64, 16, 64},    {3, 128, 40, 128},  {16, 384, 48, 128}, {17, 256, 33, 128},
                                 {40, 512, 100, 64}, {5, 1024, 20, 512}, {33, 192, 70, 64},  {9, 512, 7, 256}};

// x with zeros, rows of zeros and exact rounding ties, as the exactness test's.
std::vector<float> tile_test_rows(const TileShape& t, uint32_t seed) {
  auto x = llmk::test::random_matrix(t.rows, t.in, seed, t.rows > 2 ? 1 : -1);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); i += 7) x[i] = 0.0f;
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f;
  return x;
}

}  // namespace

TEST_CASE("Int4 rows on the AMX-INT8 tile kernel give the vector kernels' bits (software model of the tile unit)",
          "[quant][int4][amx]") {
  // The tile kernel sums each group's int8 x int4 products in int32 with
  // tdpbsud and shares the vector kernels' epilogue, so on every shape it
  // takes its outputs are the vector path's, bit for bit. Here it runs on
  // the model of the tile unit; the next test runs it on the unit itself.
  // The kernel is called directly on the rows the vector path quantized (so
  // a fall-back to the vector path cannot pass for it), and through
  // linear_w4 with W4Matmul::amx_model.
  using namespace llmk::kernels::cpu;
  if (!w4_amx_built()) LLMK_SKIP("this build's kernels have no tile kernel (it needs an AVX-512 level)");
  for (const TileShape& t : kTileShapes) {
    const W4Shape ws{t.in, t.out, t.group};
    REQUIRE(w4_amx_shape(ws));
    const auto w = llmk::test::random_matrix(t.out, t.in, 91);
    const auto x = tile_test_rows(t, 92);
    const auto [packed, scale, zero] = pack_w4_test(w, ws);
    for (const int threads : {1, 2, 3}) {
      CAPTURE(t.rows, t.in, t.out, t.group, threads);
      std::vector<float> scratch(w4_scratch_size(ws, threads, t.rows, W4Activations::int8));
      std::vector<float> y_vector(static_cast<size_t>(t.rows * t.out), -1.0f), y_tiles(y_vector.size(), -2.0f),
          y_call(y_vector.size(), -3.0f);
      linear_w4(x.data(), t.rows, ws, packed.data(), scale.data(), zero.data(), y_vector.data(), scratch.data(),
                threads, W4Activations::int8, W4Matmul::vector);
      // scratch now holds every row quantized, in the layout the tile kernel reads.
      w4_tiles::rows(true, ws, packed.data(), scale.data(), zero.data(), scratch.data(), w4_tiles::row_floats(ws),
                     t.rows, y_tiles.data(), threads);
      REQUIRE(std::equal(y_vector.begin(), y_vector.end(), y_tiles.begin()));
      linear_w4(x.data(), t.rows, ws, packed.data(), scale.data(), zero.data(), y_call.data(), scratch.data(), threads,
                W4Activations::int8, W4Matmul::amx_model);
      REQUIRE(std::equal(y_vector.begin(), y_vector.end(), y_call.begin()));
    }
  }
}

TEST_CASE("Int4 rows on the AMX-INT8 tile unit give the vector kernels' bits", "[quant][int4][amx]") {
  using namespace llmk::kernels::cpu;
  if (!w4_amx_available()) LLMK_SKIP("no AMX-INT8 tile unit here (or the kernel did not grant its state, or no AVX-512 build)");
  for (const TileShape& t : kTileShapes) {
    const W4Shape ws{t.in, t.out, t.group};
    const auto w = llmk::test::random_matrix(t.out, t.in, 93);
    const auto x = tile_test_rows(t, 94);
    const auto [packed, scale, zero] = pack_w4_test(w, ws);
    for (const int threads : {1, 2}) {
      CAPTURE(t.rows, t.in, t.out, t.group, threads);
      std::vector<float> scratch(w4_scratch_size(ws, threads, t.rows, W4Activations::int8));
      std::vector<float> y_vector(static_cast<size_t>(t.rows * t.out), -1.0f), y_tiles(y_vector.size(), -2.0f);
      linear_w4(x.data(), t.rows, ws, packed.data(), scale.data(), zero.data(), y_vector.data(), scratch.data(),
                threads, W4Activations::int8, W4Matmul::vector);
      w4_tiles::rows(false, ws, packed.data(), scale.data(), zero.data(), scratch.data(), w4_tiles::row_floats(ws),
                     t.rows, y_tiles.data(), threads);
      REQUIRE(std::equal(y_vector.begin(), y_vector.end(), y_tiles.begin()));
    }
  }
}

TEST_CASE("The AMX tile kernel takes only whole 64-input tiles", "[quant][int4][amx]") {
  using namespace llmk::kernels::cpu;
  CHECK(w4_amx_shape(W4Shape{768, 100, 128}));
  CHECK(w4_amx_shape(W4Shape{2048, 16, 512}));
  CHECK_FALSE(w4_amx_shape(W4Shape{760, 100, 8}));    // group of 8 inputs
  CHECK_FALSE(w4_amx_shape(W4Shape{800, 100, 64}));   // 800 is not whole tiles
  CHECK_FALSE(w4_amx_shape(W4Shape{1024, 16, 1024})); // a group past the kernel's buffer
  CHECK_FALSE(w4_amx_shape(W4Shape{768, 16, 96}));    // 96-input groups split a tile
}
