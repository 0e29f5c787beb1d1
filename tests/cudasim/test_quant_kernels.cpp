// The quantized linear plugins' kernels under the simulation, each against an
// independent host computation, under every seed with the race check failing
// launches: activation quantization (int8, FP8 E4M3; per row and per tensor),
// the W8A8 dp4a GEMM with its dequantizing epilogue, the int4 GEMV and
// dequantization, and the row/column scaling epilogue. Also __dp4a itself.
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/gemm_w4.hpp"
#include "kernels/cuda/gemm_w8a8.hpp"
#include "kernels/cuda/quantize_rows.hpp"
#include "kernels/cuda/scale_rows_cols.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

// A launch returned, ran and raced nowhere.
void require_clean(cudaError_t launched) {
  CUDA_REQUIRE(launched);
  CUDA_REQUIRE(cudaDeviceSynchronize());
  REQUIRE_NO_SIMULATED_RACES();
}

int32_t pack_bytes(const int8_t* b) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  return static_cast<int32_t>(w);
}

}  // namespace

#if !LLMK_CUDA_NATIVE
// The simulation's host twin of the intrinsic (on a GPU __dp4a is device code,
// exercised there by gemm_w8a8 below).
TEST_CASE("__dp4a sums four signed (or unsigned) byte products onto the accumulator", "[quant]") {
  const std::vector<int> bytes = random_ints(4000, 7, -128, 127);
  for (size_t t = 0; t + 8 <= bytes.size(); t += 8) {
    int8_t a[4], b[4];
    int want = static_cast<int>(t) - 2000;
    unsigned want_u = static_cast<unsigned>(t);
    for (int i = 0; i < 4; ++i) {
      a[i] = static_cast<int8_t>(bytes[t + i]);
      b[i] = static_cast<int8_t>(bytes[t + 4 + i]);
      want += a[i] * b[i];
      want_u += static_cast<unsigned>(static_cast<uint8_t>(a[i])) * static_cast<uint8_t>(b[i]);
    }
    REQUIRE(__dp4a(pack_bytes(a), pack_bytes(b), static_cast<int>(t) - 2000) == want);
    REQUIRE(__dp4a(static_cast<unsigned>(pack_bytes(a)), static_cast<unsigned>(pack_bytes(b)),
                   static_cast<unsigned>(t)) == want_u);
  }
}
#endif  // !LLMK_CUDA_NATIVE

TEST_CASE("quantize_rows gives each row (or the tensor) its absmax scale and every element its nearest level",
          "[quant]") {
  const int64_t rows = 37, in = 67, k_pad = 80;
  std::vector<float> x = random_floats(static_cast<size_t>(rows * in), 3, -2.0f, 2.0f);
  for (int64_t k = 0; k < in; ++k) x[5 * in + k] = 0.0f;                 // an all-zero row: scale 0, q 0
  for (int64_t k = 0; k < in; ++k) x[6 * in + k] *= 1e-3f;              // FP8 subnormals under a tensor scale
  x[9 * in + 4] = 40.0f;                                                 // one outlier sets the tensor's scale
  for (const uint64_t seed : seeds) {
    INFO("seed " << seed);
    reset_simulator(seed);
    device_buffer<float> d_x(x), d_amax(rows), d_scale(rows);
    device_buffer<int8_t> d_q8(static_cast<size_t>(rows * k_pad));
    device_buffer<__nv_fp8_e4m3> d_q(static_cast<size_t>(rows * k_pad));
    require_clean(llmk::cuda::row_absmax(d_x.get(), rows, in, d_amax.get(), nullptr));
    const std::vector<float> amax = d_amax.download();
    float tensor_amax = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      float m = 0.0f;
      for (int64_t k = 0; k < in; ++k) m = std::max(m, std::fabs(x[r * in + k]));
      REQUIRE(amax[r] == m);
      tensor_amax = std::max(tensor_amax, m);
    }

    // int8, per row: scale = amax / 127, |x - q scale| <= scale / 2, padding zero.
    require_clean(llmk::cuda::quantize_rows_i8(d_x.get(), rows, in, k_pad, nullptr, d_q8.get(), d_scale.get(), nullptr));
    const std::vector<int8_t> q8 = d_q8.download();
    std::vector<float> scale = d_scale.download();
    for (int64_t r = 0; r < rows; ++r) {
      REQUIRE(scale[r] == amax[r] / 127.0f);
      for (int64_t k = 0; k < k_pad; ++k) {
        const int q = q8[r * k_pad + k];
        if (k >= in || amax[r] == 0.0f) {
          REQUIRE(q == 0);
          continue;
        }
        REQUIRE(std::abs(q) <= 127);
        // Half a step, plus float's rounding of x * 127 / amax.
        REQUIRE(std::fabs(x[r * in + k] - q * static_cast<double>(scale[r])) <= scale[r] * (0.5 + 1e-5));
      }
    }

    // FP8 E4M3, per row and per tensor: the scale maps amax to 448; each element
    // is the nearest E4M3 value of x / scale: relative error <= 2^-4 for
    // normals, absolute <= 2^-10 (half the subnormal step) below 2^-6.
    for (const bool per_tensor : {false, true}) {
      INFO("per tensor " << per_tensor);
      require_clean(llmk::cuda::quantize_rows_fp8(d_x.get(), rows, in, k_pad, per_tensor ? d_amax.get() : nullptr,
                                                  d_q.get(), d_scale.get(), nullptr));
      const std::vector<__nv_fp8_e4m3> q = d_q.download();
      scale = d_scale.download();
      for (int64_t r = 0; r < rows; ++r) {
        const float m = per_tensor ? tensor_amax : amax[r];
        REQUIRE(scale[r] == m / 448.0f);
        for (int64_t k = 0; k < k_pad; ++k) {
          const double v = static_cast<float>(q[r * k_pad + k]);
          if (k >= in || m == 0.0f) {
            REQUIRE(v == 0.0);
            continue;
          }
          const double want = x[r * in + k] / static_cast<double>(scale[r]);
          REQUIRE(std::fabs(v) <= 448.0);
          REQUIRE(std::fabs(v - want) <= std::fabs(want) / 16 + std::ldexp(1.0, -10) + 1e-5 * std::fabs(want));
        }
      }
    }
  }
}

TEST_CASE("gemm_w8a8 sums int8 products exactly and scales them by row and channel, for decode and prefill tiles",
          "[quant]") {
  const int64_t out = 131;
  for (const int64_t in : {67, 256}) {
    const int64_t k_pad = (in + 15) / 16 * 16;
    for (const int64_t rows : {1, 16, 17, 37}) {
      INFO("in " << in << " rows " << rows);
      const std::vector<int> xi = random_ints(static_cast<size_t>(rows * in), 11 + rows, -127, 127);
      const std::vector<int> wi = random_ints(static_cast<size_t>(out * in), 13, -127, 127);
      std::vector<int8_t> xq(static_cast<size_t>(rows * k_pad), 0), wq(static_cast<size_t>(out * k_pad), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < in; ++k) xq[r * k_pad + k] = static_cast<int8_t>(xi[r * in + k]);
      for (int64_t n = 0; n < out; ++n)
        for (int64_t k = 0; k < in; ++k) wq[n * k_pad + k] = static_cast<int8_t>(wi[n * in + k]);
      const std::vector<float> xs = random_floats(static_cast<size_t>(rows), 17, 1e-3f, 2e-2f);
      const std::vector<float> ws = random_floats(static_cast<size_t>(out), 19, 1e-3f, 2e-2f);
      for (const uint64_t seed : seeds) {
        INFO("seed " << seed);
        reset_simulator(seed);
        device_buffer<int8_t> d_xq(xq), d_wq(wq);
        device_buffer<float> d_xs(xs), d_ws(ws), d_y(static_cast<size_t>(rows * out));
        require_clean(llmk::cuda::gemm_w8a8(d_xq.get(), d_xs.get(), rows, d_wq.get(), d_ws.get(), out, k_pad,
                                            d_y.get(), nullptr));
        const std::vector<float> y = d_y.download();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = 0; n < out; ++n) {
            int64_t acc = 0;
            for (int64_t k = 0; k < in; ++k) acc += int64_t{xi[r * in + k]} * wi[n * in + k];
            const double want = static_cast<double>(acc) * xs[r] * ws[n];
            // The int32 sum is exact; float(acc) and two float products round three times.
            REQUIRE(std::fabs(y[r * out + n] - want) <= 4e-7 * std::fabs(want) + 1e-30);
          }
      }
    }
  }
}

TEST_CASE("scale_rows_cols multiplies each element by its row's and column's scale, nulls meaning one, in place too",
          "[quant]") {
  const int64_t rows = 9, cols = 131, ld = 144;
  const std::vector<float> acc = random_floats(static_cast<size_t>(rows * ld), 23, -50.0f, 50.0f);
  const std::vector<float> rs = random_floats(static_cast<size_t>(rows), 29, 0.1f, 2.0f);
  const std::vector<float> cs = random_floats(static_cast<size_t>(cols), 31, 0.1f, 2.0f);
  for (const uint64_t seed : seeds) {
    reset_simulator(seed);
    device_buffer<float> d_acc(acc), d_rs(rs), d_cs(cs), d_y(static_cast<size_t>(rows * cols));
    for (const int which : {0, 1, 2, 3}) {
      const bool use_rows = which & 1, use_cols = which & 2;
      require_clean(llmk::cuda::scale_rows_cols(d_acc.get(), ld, use_rows ? d_rs.get() : nullptr,
                                                use_cols ? d_cs.get() : nullptr, rows, cols, d_y.get(), nullptr));
      const std::vector<float> y = d_y.download();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float want = acc[r * ld + c];
          if (use_rows) want *= rs[r];
          if (use_cols) want *= cs[c];
          REQUIRE(y[r * cols + c] == want);
        }
    }
    // In place (ld == cols).
    std::vector<float> dense(acc.begin(), acc.begin() + rows * cols);
    device_buffer<float> d_dense(dense);
    require_clean(llmk::cuda::scale_rows_cols(d_dense.get(), cols, d_rs.get(), d_cs.get(), rows, cols, d_dense.get(),
                                              nullptr));
    const std::vector<float> y = d_dense.download();
    for (int64_t i = 0; i < rows * cols; ++i) REQUIRE(y[i] == dense[i] * rs[i / cols] * cs[i % cols]);
  }
}

TEST_CASE("w4_gemv and w4_dequantize_bf16 read nibbles, group scales and zero points as the CPU scheme defines",
          "[quant]") {
  const int64_t out = 131;
  struct Shape {
    int64_t in, group;
  };
  for (const Shape s : {Shape{67, 64}, Shape{67, 67}, Shape{256, 128}, Shape{256, 32}}) {
    const llmk::cuda::W4DeviceShape shape{s.in, out, s.group};
    INFO("in " << s.in << " group " << s.group);
    const int64_t k_words = shape.k_words(), num_groups = shape.num_groups();
    // Random nibbles everywhere, including past in_features (the kernels must ignore them).
    const std::vector<int> nib = random_ints(static_cast<size_t>(out * k_words * 8), 37, 0, 15);
    std::vector<uint32_t> packed(static_cast<size_t>(out * k_words), 0u);
    for (size_t i = 0; i < nib.size(); ++i) packed[i / 8] |= static_cast<uint32_t>(nib[i]) << (4 * (i % 8));
    const std::vector<float> scale = random_floats(static_cast<size_t>(out * num_groups), 41, 0.001f, 0.1f);
    const std::vector<int> zi = random_ints(scale.size(), 43, 0, 15);
    const std::vector<uint8_t> zero(zi.begin(), zi.end());
    auto w_at = [&](int64_t n, int64_t k) {  // (q - zero) * scale in float, as the kernels compute it
      const int64_t g = k / s.group;
      return (static_cast<float>(nib[n * k_words * 8 + k]) - static_cast<float>(zero[n * num_groups + g])) *
             scale[n * num_groups + g];
    };
    for (const uint64_t seed : seeds) {
      INFO("seed " << seed);
      reset_simulator(seed);
      device_buffer<uint32_t> d_packed(packed);
      device_buffer<float> d_scale(scale);
      device_buffer<uint8_t> d_zero(zero);
      for (const int64_t rows : {int64_t{1}, int64_t{3}, llmk::cuda::kW4GemvMaxRows}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(rows * s.in), 47 + rows);
        device_buffer<float> d_x(x), d_y(static_cast<size_t>(rows * out));
        require_clean(llmk::cuda::w4_gemv(d_x.get(), rows, shape, d_packed.get(), d_scale.get(), d_zero.get(),
                                          d_y.get(), nullptr));
        const std::vector<float> y = d_y.download();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = 0; n < out; ++n) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < s.in; ++k) {
              want += static_cast<double>(w_at(n, k)) * x[r * s.in + k];
              mag += std::fabs(static_cast<double>(w_at(n, k)) * x[r * s.in + k]);
            }
            // Float sums of in_features products: in * 2^-24 of the magnitude, twice over.
            REQUIRE(std::fabs(y[r * out + n] - want) <= 2.0 * s.in * std::ldexp(mag, -24) + 1e-30);
          }
      }
      // A slice of channels starting mid-matrix, exactly the float value rounded to bf16.
      const int64_t c0 = 5, num = 100;
      device_buffer<__nv_bfloat16> d_w(static_cast<size_t>(num * s.in));
      require_clean(llmk::cuda::w4_dequantize_bf16(shape, d_packed.get(), d_scale.get(), d_zero.get(), c0, num,
                                                   d_w.get(), nullptr));
      const std::vector<__nv_bfloat16> w = d_w.download();
      for (int64_t n = 0; n < num; ++n)
        for (int64_t k = 0; k < s.in; ++k)
          REQUIRE(__bfloat162float(w[n * s.in + k]) == __bfloat162float(__float2bfloat16_rn(w_at(c0 + n, k))));
    }
  }
}
