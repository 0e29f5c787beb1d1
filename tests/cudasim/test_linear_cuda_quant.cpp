// The quantized CUDA linear plugins (linear.cuda_int8, linear.cuda_int4,
// linear.cuda_fp8), loaded from tests/cudasim_plugins like any plugin,
// against float64 y = x W^T over the unquantized weights and activations on
// odd shapes, each within an error bound derived from its scheme (written
// next to it); their forwards replay from a CUDA graph byte for byte; and
// their refusals name the reason.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/plugin_loader.hpp"
#include "kernels/cpu/linear_lut4.hpp"
#include "kernels/cpu/linear_w4.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

constexpr uint32_t kOut = 131, kMaxRows = 37;
const uint32_t kInFeatures[] = {67, 128, 256};
const uint32_t kRows[] = {1, 2, 8, 9, 17, 37};  // both sides of the decode/prefill thresholds (int4: 8, int8: 16)

llmk_linear_desc make_desc(uint32_t in, const float* w, const char* options, uint32_t out = kOut) {
  llmk_linear_desc d{};
  d.struct_size = sizeof(d);
  d.name = "model.layers.0.mlp.down_proj";
  d.in_features = in;
  d.out_features = out;
  d.weight_dtype = LLMK_DTYPE_F32;
  d.weight = w;
  d.max_rows = kMaxRows;
  d.num_threads = 1;
  d.options = options;
  d.device = LLMK_DEVICE_CUDA;
  d.activation_dtype = LLMK_DTYPE_F32;
  return d;
}

std::shared_ptr<llmk::LinearWorkspace> device_workspace() {
  return std::make_shared<llmk::LinearWorkspace>(
      [](size_t bytes) -> void* {
        void* p = nullptr;
        REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
        return p;
      },
      [](void* p) noexcept { cudaFree(p); });
}

// Allowed |y - y_ref| for output (r, n) of a layer with weight w [out, in] and
// activations x [rows, in].
using Bound = std::function<double(const std::vector<float>& x, const std::vector<float>& w, uint32_t in,
                                   uint32_t r, uint32_t n)>;

// Runs the plugin over every row count and checks each output against float64.
// w: [out, in].
void check_plugin(const char* plugin, const char* options, const std::vector<float>& w, uint32_t in,
                  const Bound& bound, size_t want_weight_bytes) {
  const auto out = static_cast<uint32_t>(w.size() / in);
  INFO(plugin << " " << options << " in " << in << " out " << out);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const llmk_linear_desc d = make_desc(in, w.data(), options, out);
  llmk::LinearImpl layer(registry.load(plugin, LLMK_PLUGIN_LINEAR), d, device_workspace());
  CHECK(layer.weight_bytes() == want_weight_bytes);
  for (const uint32_t rows : kRows) {
    INFO("rows " << rows);
    const std::vector<float> x = random_floats(static_cast<size_t>(rows) * in, 100 + rows + in);
    device_buffer<float> d_x(x), d_y(static_cast<size_t>(rows) * out);
    layer.forward(d_x.get(), d_y.get(), rows, nullptr);
    const std::vector<float> y = d_y.download();
    double worst = 0;  // the largest error as a share of its bound, for the log
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t n = 0; n < out; ++n) {
        double want = 0;
        for (uint32_t k = 0; k < in; ++k) want += static_cast<double>(x[r * in + k]) * w[n * in + k];
        const double err = std::fabs(y[r * out + n] - want), allowed = bound(x, w, in, r, n);
        worst = std::max(worst, err / allowed);
        if (!(err <= allowed)) FAIL("y[" << r << ", " << n << "] = " << y[r * out + n] << ", float64 " << want
                                          << ", error " << err << " above the bound " << allowed);
      }
    UNSCOPED_INFO("worst error / bound " << worst);
  }
}

double row_absmax(const std::vector<float>& v, size_t row, uint32_t len) {
  double m = 0;
  for (uint32_t k = 0; k < len; ++k) m = std::max(m, std::fabs(static_cast<double>(v[row * len + k])));
  return m;
}

// Sum over k of |x[r, k] w[n, k]|: float accumulation errors scale with it.
double magnitude(const std::vector<float>& x, const std::vector<float>& w, uint32_t in, uint32_t r, uint32_t n) {
  double s = 0;
  for (uint32_t k = 0; k < in; ++k) s += std::fabs(static_cast<double>(x[r * in + k]) * w[n * in + k]);
  return s;
}

}  // namespace

TEST_CASE("linear.cuda_int8 stays within the W8A8 rounding bound of float64 on odd shapes", "[linear_cuda_quant]") {
  reset_simulator(1);
  for (const uint32_t in : kInFeatures) {
    const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 7 + in);
    // W8A8, symmetric, x per row and w per channel: each operand is off by at
    // most half its step, ex <= sx / 2 = |x|max / 254 and ew <= |w|max / 254, so
    // |x^ w^ - x w| <= |x| ew + |w| ex + ex ew and over k terms
    //   |err| <= k |x|max |w|max (2 / 254 + 1 / 254^2);
    // the int32 sum is exact and the epilogue adds ~3 float roundings.
    const Bound w8a8 = [](const std::vector<float>& x, const std::vector<float>& w, uint32_t in, uint32_t r,
                          uint32_t n) {
      const double xm = row_absmax(x, r, in), wm = row_absmax(w, n, in);
      return in * xm * wm * (2.0 / 254 + 1.0 / (254.0 * 254.0)) + 1e-6 * magnitude(x, w, in, r, n);
    };
    const size_t k_pad = (in + 15) / 16 * 16;
    check_plugin("linear.cuda_int8", "{}", w, in, w8a8, kOut * k_pad + kOut * 4);
  }
}

TEST_CASE("linear.cuda_int4 with min_max groups stays within half a step per weight of float64",
          "[linear_cuda_quant]") {
  reset_simulator(1);
  for (const uint32_t in : kInFeatures) {
    const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 9 + in);
    for (const uint32_t group : {32u, 128u}) {
      const uint32_t g = std::min(group, in);
      // Weight-only int4, min_max range: the group's step is s = (max(0, hi) -
      // min(0, lo)) / 15 and every weight lands on its nearest level, so
      // |w^ - w| <= s / 2 and |err| <= sum_k |x_k| s_g(k) / 2. Activations stay
      // f32 for decode (GEMV: float sums, 1e-6 of the magnitude); prefill rounds x
      // and w^ to bf16 (2^-9 relative each, 2^-8 + 2^-16 on a product).
      const Bound int4 = [g](const std::vector<float>& x, const std::vector<float>& w, uint32_t in, uint32_t r,
                             uint32_t n) {
        double err = 0, mag = 0;
        for (uint32_t k0 = 0; k0 < in; k0 += g) {
          double lo = 0, hi = 0;
          for (uint32_t k = k0; k < std::min(in, k0 + g); ++k) {
            lo = std::min(lo, static_cast<double>(w[n * in + k]));
            hi = std::max(hi, static_cast<double>(w[n * in + k]));
          }
          const double step = (hi - lo) / 15;
          for (uint32_t k = k0; k < std::min(in, k0 + g); ++k) {
            err += std::fabs(x[r * in + k]) * step / 2 * (1 + 1e-6);
            mag += std::fabs(x[r * in + k]) * (std::fabs(w[n * in + k]) + step / 2);
          }
        }
        return err + mag * (std::ldexp(1.0, -8) + std::ldexp(1.0, -16) + 1e-6);
      };
      const std::string options =
          R"({"range":"min_max","group_size":)" + std::to_string(group) + R"(,"prefill_channels":48})";
      const size_t groups = (in + g - 1) / g;
      check_plugin("linear.cuda_int4", options.c_str(), w, in, int4, kOut * ((in + 7) / 8) * 4 + kOut * groups * 5);
    }
  }
}

TEST_CASE("linear.cuda_int4 by default matches the CPU scheme's mse-fitted groups within float and bf16 rounding",
          "[linear_cuda_quant]") {
  reset_simulator(1);
  for (const uint32_t in : kInFeatures) {
    const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 13 + in);
    // The CPU engine's own fit (kernels/cpu/linear_w4.hpp, range mse, groups of
    // 128): y over these dequantized weights differs from the plugin's only by
    // float sums (decode) or bf16 rounding of x and w^ (prefill); the bound is
    // that plus the distance of the dequantized weights from w itself.
    const uint32_t g = std::min(128u, in);
    std::vector<double> w_deq(w.size());
    for (uint32_t n = 0; n < kOut; ++n)
      for (uint32_t k0 = 0; k0 < in; k0 += g) {
        const uint32_t len = std::min(in, k0 + g) - k0;
        const auto fit = llmk::kernels::cpu::w4_fit_group(&w[n * in + k0], len, llmk::kernels::cpu::W4Range::mse);
        for (uint32_t k = k0; k < k0 + len; ++k) {
          const double q = std::clamp(std::nearbyint(w[n * in + k] / static_cast<double>(fit.scale)) + fit.zero, 0.0,
                                      15.0);
          w_deq[n * in + k] = (q - fit.zero) * fit.scale;
        }
      }
    const Bound mse = [&w_deq](const std::vector<float>& x, const std::vector<float>& w, uint32_t in, uint32_t r,
                               uint32_t n) {
      double err = 0, mag = 0;
      for (uint32_t k = 0; k < in; ++k) {
        err += std::fabs(x[r * in + k] * (w_deq[n * in + k] - w[n * in + k]));
        mag += std::fabs(x[r * in + k] * w_deq[n * in + k]);
      }
      return err * (1 + 1e-6) + mag * (std::ldexp(1.0, -8) + std::ldexp(1.0, -16) + 1e-6);
    };
    check_plugin("linear.cuda_int4", "{}", w, in, mse, kOut * ((in + 7) / 8) * 4 + kOut * ((in + g - 1) / g) * 5);
  }
}

TEST_CASE("linear.cuda_lut4 computes on the CPU quantizer's NF4 and IQ4_NL weights within float and bf16 rounding",
          "[linear_cuda_quant]") {
  using namespace llmk::kernels::cpu;
  reset_simulator(1);
  for (const uint32_t in : kInFeatures)
    for (const Lut4Book book : {Lut4Book::iq4_nl, Lut4Book::nf4}) {
      const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 19 + in);
      // The CPU's own quantizer and layout (kernels/cpu/linear_lut4.hpp), each
      // weight scale * values[q] in float64: the plugin differs from y over
      // these only by float sums (decode) or bf16 rounding of x and w^ (prefill).
      const bool nf4 = book == Lut4Book::nf4;
      const Lut4Shape shape{in, kOut, nf4 ? 64 : 32};
      std::vector<uint8_t> q(w.size()), packed(lut4_size(shape));
      std::vector<float> scale(static_cast<size_t>(kOut * shape.num_blocks()));
      quantize_lut4(w.data(), shape, book, nf4 ? Lut4Scale::absmax : Lut4Scale::search, q.data(), scale.data(), 1);
      pack_lut4(q.data(), scale.data(), shape, packed.data());
      const Lut4Codebook& c = lut4_codebook(book);
      std::vector<double> w_deq(w.size());
      for (uint32_t n = 0; n < kOut; ++n)
        for (uint32_t k = 0; k < in; ++k)
          w_deq[n * in + k] = double(lut4_scale_at(packed.data(), shape, n, k)) *
                              c.values[lut4_index_at(packed.data(), shape, n, k)];
      const std::string options = nf4 ? R"({"codebook":"nf4","prefill_channels":48})" : R"({"prefill_channels":48})";
      INFO((nf4 ? "nf4" : "iq4_nl") << " in " << in);
      llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
      const llmk_linear_desc d = make_desc(in, w.data(), options.c_str());
      llmk::LinearImpl layer(registry.load("linear.cuda_lut4", LLMK_PLUGIN_LINEAR), d, device_workspace());
      CHECK(layer.weight_bytes() == size_t(kOut) * ((in + 63) / 64) * 36);
      for (const uint32_t rows : kRows) {
        INFO("rows " << rows);
        const std::vector<float> x = random_floats(static_cast<size_t>(rows) * in, 200 + rows + in);
        device_buffer<float> d_x(x), d_y(static_cast<size_t>(rows) * kOut);
        layer.forward(d_x.get(), d_y.get(), rows, nullptr);
        const std::vector<float> y = d_y.download();
        for (uint32_t r = 0; r < rows; ++r)
          for (uint32_t n = 0; n < kOut; ++n) {
            double want = 0, mag = 0;
            for (uint32_t k = 0; k < in; ++k) {
              want += double(x[r * in + k]) * w_deq[n * in + k];
              mag += std::fabs(double(x[r * in + k]) * w_deq[n * in + k]);
            }
            // Decode: f32 sums; prefill: x and w^ rounded to bf16 (2^-9 each).
            const double allowed = mag * (rows <= 8 ? 1e-5 : std::ldexp(1.0, -8) + std::ldexp(1.0, -16) + 1e-6);
            if (!(std::fabs(y[r * kOut + n] - want) <= allowed))
              FAIL("y[" << r << ", " << n << "] = " << y[r * kOut + n] << ", float64 over the dequantized weights "
                        << want << ", bound " << allowed);
          }
      }
    }
}

TEST_CASE("linear.cuda_fp8 stays within the E4M3 rounding bound of float64 for every scale granularity",
          "[linear_cuda_quant]") {
  reset_simulator(1);
  for (const uint32_t in : kInFeatures) {
    const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 17 + in);
    for (const bool w_channel : {true, false})
      for (const bool x_token : {true, false}) {
        // E4M3 keeps 3 mantissa bits: an operand scaled into [-448, 448] is off
        // by at most 2^-4 of itself, or 2^-10 (half the subnormal step) times its
        // scale below 2^-6: e = |v| / 16 + s / 1024 with s = amax / 448 of its
        // row, channel or tensor. Per product |x^ w^ - x w| <= |x| ew + |w| ex +
        // ex ew, summed over k; cuBLASLt sums in float (1e-6 of the magnitude).
        const Bound fp8 = [w_channel, x_token](const std::vector<float>& x, const std::vector<float>& w, uint32_t in,
                                               uint32_t r, uint32_t n) {
          const size_t rows = x.size() / in;
          double sx = 0, sw = 0;
          for (size_t i = 0; i < rows; ++i)
            if (!x_token || i == r) sx = std::max(sx, row_absmax(x, i, in) / 448);
          for (uint32_t c = 0; c < w.size() / in; ++c)
            if (!w_channel || c == n) sw = std::max(sw, row_absmax(w, c, in) / 448);
          double err = 0;
          for (uint32_t k = 0; k < in; ++k) {
            const double xv = std::fabs(x[r * in + k]), wv = std::fabs(w[n * in + k]);
            const double ex = xv / 16 + sx / 1024, ew = wv / 16 + sw / 1024;
            err += xv * ew + wv * ex + ex * ew;
          }
          return err * (1 + 1e-5) + 1e-6 * magnitude(x, w, in, r, n);
        };
        const std::string options = std::string(R"({"weight_scale":")") + (w_channel ? "channel" : "tensor") +
                                    R"(","activation_scale":")" + (x_token ? "token" : "tensor") + R"("})";
        const size_t out_pad = (kOut + 15) / 16 * 16, k_pad = (in + 15) / 16 * 16;
        check_plugin("linear.cuda_fp8", options.c_str(), w, in, fp8, out_pad * k_pad + (w_channel ? kOut : 1) * 4);
        if (w_channel || x_token) continue;
        // out_features a multiple of 16 with both scales per tensor: cuBLASLt
        // applies them itself and writes y, no epilogue.
        const std::vector<float> w128(w.begin(), w.begin() + 128 * in);
        check_plugin("linear.cuda_fp8", options.c_str(), w128, in, fp8, 128 * k_pad + 4);
      }
  }
}

TEST_CASE("Each quantized plugin's forward replays from a CUDA graph byte for byte", "[linear_cuda_quant]") {
  reset_simulator(1);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const uint32_t in = 67;
  const std::vector<float> w = random_floats(static_cast<size_t>(kOut) * in, 71);
  struct Case {
    const char* plugin;
    const char* options;
  };
  for (const Case c : {Case{"linear.cuda_int8", "{}"}, Case{"linear.cuda_int4", "{}"},
                       Case{"linear.cuda_fp8", R"({"weight_scale":"tensor","activation_scale":"tensor"})"},
                       Case{"linear.cuda_fp8", "{}"}})
    for (const uint32_t rows : {1u, 37u}) {
      INFO(c.plugin << " " << c.options << " rows " << rows);
      const llmk_linear_desc d = make_desc(in, w.data(), c.options);
      llmk::LinearImpl layer(registry.load(c.plugin, LLMK_PLUGIN_LINEAR), d, device_workspace());
      const std::vector<float> x = random_floats(static_cast<size_t>(rows) * in, 73 + rows);
      device_buffer<float> d_x(x), d_y(static_cast<size_t>(rows) * kOut);
      cudaStream_t stream;
      CUDA_REQUIRE(cudaStreamCreate(&stream));
      layer.forward(d_x.get(), d_y.get(), rows, stream);  // eager; sizes the workspace
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      const std::vector<float> eager = d_y.download();
      CUDA_REQUIRE(cudaMemset(d_y.get(), 0, eager.size() * sizeof(float)));
      cudaGraph_t graph;
      CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      layer.forward(d_x.get(), d_y.get(), rows, stream);
      CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
      REQUIRE(d_y.download() == std::vector<float>(eager.size(), 0.0f));  // recorded, not run
      cudaGraphExec_t exec;
      CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_REQUIRE(cudaGraphLaunch(exec, stream));
      CUDA_REQUIRE(cudaStreamSynchronize(stream));
      REQUIRE(d_y.download() == eager);
      CUDA_REQUIRE(cudaGraphExecDestroy(exec));
      CUDA_REQUIRE(cudaGraphDestroy(graph));
      CUDA_REQUIRE(cudaStreamDestroy(stream));
    }
}

TEST_CASE("The quantized CUDA plugins refuse the CPU, bad options and (FP8) devices below sm_89, naming why",
          "[linear_cuda_quant]") {
  reset_simulator(1);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const std::vector<float> w(static_cast<size_t>(kOut) * 67, 0.25f);
  for (const char* name : {"linear.cuda_int8", "linear.cuda_int4", "linear.cuda_fp8"}) {
    INFO(name);
    const llmk::Plugin plugin = registry.load(name, LLMK_PLUGIN_LINEAR);
    llmk_linear_desc d = make_desc(67, w.data(), "{}");
    d.device = LLMK_DEVICE_CPU;
    CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("this plugin runs on CUDA, the desc names cpu"));
    d.device = LLMK_DEVICE_CUDA;
    d.activation_dtype = LLMK_DTYPE_BF16;
    CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("is not f32"));
    d.activation_dtype = LLMK_DTYPE_F32;
    d.options = R"({"bits":3})";
    CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("unknown plugin option \"bits\""));
    d.options = "[1]";
    CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("not a JSON object"));
  }
  const llmk::Plugin int4 = registry.load("linear.cuda_int4", LLMK_PLUGIN_LINEAR);
  llmk_linear_desc d = make_desc(67, w.data(), R"({"group_size":12})");
  CHECK_THROWS_WITH(llmk::LinearImpl(int4, d), Catch::Contains("must be a multiple of 8 or at least in_features"));
  d.options = R"({"range":"max"})";
  CHECK_THROWS_WITH(llmk::LinearImpl(int4, d), Catch::Contains("option range is \"max\""));
  const llmk::Plugin fp8 = registry.load("linear.cuda_fp8", LLMK_PLUGIN_LINEAR);
  d.options = R"({"weight_scale":"block"})";
  CHECK_THROWS_WITH(llmk::LinearImpl(fp8, d), Catch::Contains("expected one of channel, tensor"));
  d.options = "{}";
#if !LLMK_CUDA_NATIVE
  cudasim::set_compute_capability(8, 0);
  CHECK_THROWS_WITH(llmk::LinearImpl(fp8, d), Catch::Contains("compute capability 8.9 or newer") &&
                                                  Catch::Contains("is 8.0"));
  cudasim::set_compute_capability(9, 0);
  CHECK_NOTHROW(llmk::LinearImpl(fp8, d));
#else
  // The device is what it is: FP8 serves from 8.9 on and is refused below.
  int device = 0, major = 0, minor = 0;
  CUDA_REQUIRE(cudaGetDevice(&device));
  CUDA_REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major * 10 + minor >= 89) {
    CHECK_NOTHROW(llmk::LinearImpl(fp8, d));
  } else {
    CHECK_THROWS_WITH(llmk::LinearImpl(fp8, d), Catch::Contains("compute capability 8.9 or newer"));
  }
#endif
}
