// The simulated cuBLASLt subset against float64 loops, and the plugin built
// on it (linear.cublas, loaded from tests/cudasim_plugins like any plugin)
// against float64 on odd shapes.
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/plugin_loader.hpp"
#include "kernels/cpu/convert.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;

namespace {

// Column-major element (i, j) of a matrix with leading dimension ld.
inline std::int64_t at(std::int64_t i, std::int64_t j, std::int64_t ld) { return i + j * ld; }

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = llmk::kernels::cpu::f32_to_bf16(x[i]);
  return out;
}

double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("cublasLtMatmul computes D = alpha op(A) op(B) + beta C over odd shapes, transposes and leading dimensions",
          "[cublaslt]") {
  reset_simulator(1);
  cublasLtHandle_t handle = nullptr;
  REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const int m = 13, n = 7, k = 29;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      INFO("transa " << ta << " transb " << tb);
      // Stored shapes: A is m x k (or k x m when transposed), B k x n (or n x k); lds padded by 3.
      const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_rows + 3, ldb = b_rows + 3, ldd = m + 3;
      const std::vector<float> a = random_floats(static_cast<size_t>(lda) * a_cols, 11 + ta);
      const std::vector<float> b = random_floats(static_cast<size_t>(ldb) * b_cols, 21 + tb);
      const std::vector<float> c = random_floats(static_cast<size_t>(ldd) * n, 31);
      device_buffer<float> d_a(a), d_b(b), d_cd(c);
      cublasLtMatmulDesc_t desc = nullptr;
      REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
      const int32_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)) ==
              CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)) ==
              CUBLAS_STATUS_SUCCESS);
      cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
      REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, a_rows, a_cols, lda) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, b_rows, b_cols, ldb) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd) == CUBLAS_STATUS_SUCCESS);
      const float alpha = 0.75f, beta = -0.5f;  // C aliases D, read with beta != 0
      REQUIRE(cublasLtMatmul(handle, desc, &alpha, d_a.get(), la, d_b.get(), lb, &beta, d_cd.get(), ld, d_cd.get(),
                             ld, nullptr, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
      const std::vector<float> got = d_cd.download();
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double acc = 0;
          for (int l = 0; l < k; ++l)
            acc += static_cast<double>(ta ? a[at(l, i, lda)] : a[at(i, l, lda)]) *
                   (tb ? b[at(j, l, ldb)] : b[at(l, j, ldb)]);
          const double want = alpha * acc + beta * c[at(i, j, ldd)];
          REQUIRE(std::fabs(got[at(i, j, ldd)] - want) < 1e-5 * (1 + std::fabs(want)));
        }
      // The padding rows between columns are untouched.
      for (int j = 0; j < n; ++j)
        for (int i = m; i < ldd; ++i) REQUIRE(got[at(i, j, ldd)] == c[at(i, j, ldd)]);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatmulDescDestroy(desc);
    }
  cublasLtDestroy(handle);
}

#if !LLMK_CUDA_NATIVE
// What the simulated subset refuses: simulation only (the real library has
// epilogues, and does not check where A lives).
TEST_CASE("cublasLtMatmul refuses shapes that disagree, host pointers and attributes it does not model",
          "[cublaslt]") {
  reset_simulator(1);
  cublasLtHandle_t handle = nullptr;
  REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof(relu)) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t l4x4 = nullptr, l4x5 = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&l4x4, CUDA_R_32F, 4, 4, 4) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&l4x5, CUDA_R_32F, 4, 5, 4) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t bad = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 4, 4, 3) == CUBLAS_STATUS_INVALID_VALUE);  // ld < rows
  device_buffer<float> a(16), b(20), d(20);
  const float one = 1.0f, zero = 0.0f;
  // op(A) 4x4 times op(B) 4x5 into a 4x4 D: the shapes disagree.
  CHECK(cublasLtMatmul(handle, desc, &one, a.get(), l4x4, b.get(), l4x5, &zero, d.get(), l4x4, d.get(), l4x4, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cudasim::last_error_detail()).find("do not agree") != std::string::npos);
  // A in host memory.
  std::vector<float> host(16);
  CHECK(cublasLtMatmul(handle, desc, &one, host.data(), l4x4, b.get(), l4x5, &zero, d.get(), l4x5, d.get(), l4x5,
                       nullptr, nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cudasim::last_error_detail()).find("A is not inside one device allocation") != std::string::npos);
  cublasLtMatrixLayoutDestroy(l4x4);
  cublasLtMatrixLayoutDestroy(l4x5);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}
#endif  // !LLMK_CUDA_NATIVE

TEST_CASE("linear.cublas under the simulation: y = x W^T within each storage dtype's rounding of float64",
          "[cublaslt][linear_cublas]") {
  reset_simulator(1);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const uint32_t in = 67, out = 131, max_rows = 37;
  const std::vector<float> w = random_floats(static_cast<size_t>(out) * in, 5);
  const std::vector<uint16_t> w_bf16 = to_bf16(w);
  // Tolerances, relative to the largest |y|: F32 is float accumulation of
  // exact products (k = 67 terms: ~1e-6); BF16 storage is compared with
  // float64 over the bf16-rounded weights and activations, so only float
  // accumulation remains there too.
  constexpr double kF32Tol = 2e-6, kRoundedTol = 2e-6;
  struct Case {
    const char* name;
    uint32_t weight_dtype;
    const void* weight;
    const char* options;
    bool rounds_to_bf16;
  };
  const Case cases[] = {{"f32 weights", LLMK_DTYPE_F32, w.data(), "{}", false},
                        {"f32 checkpoint stored as bf16", LLMK_DTYPE_F32, w.data(), R"({"dtype":"bf16"})", true},
                        {"bf16 checkpoint kept", LLMK_DTYPE_BF16, w_bf16.data(), "{}", true}};
  for (const Case& c : cases) {
    INFO(c.name);
    llmk_linear_desc d{};
    d.struct_size = sizeof(d);
    d.name = "test.layer";
    d.in_features = in;
    d.out_features = out;
    d.weight_dtype = c.weight_dtype;
    d.weight = c.weight;
    d.max_rows = max_rows;
    d.num_threads = 1;
    d.options = c.options;
    d.device = LLMK_DEVICE_CUDA;
    d.activation_dtype = LLMK_DTYPE_F32;
    auto workspace = std::make_shared<llmk::LinearWorkspace>(
        [](size_t bytes) -> void* {
          void* p = nullptr;
          REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
          return p;
        },
        [](void* p) noexcept { cudaFree(p); });
    llmk::LinearImpl layer(registry.load("linear.cublas", LLMK_PLUGIN_LINEAR), d, workspace);
    CHECK(layer.weight_bytes() == static_cast<size_t>(out) * in * (c.rounds_to_bf16 ? 2 : 4));
    for (const uint32_t rows : {1u, 2u, 17u, max_rows}) {
      const std::vector<float> x = random_floats(static_cast<size_t>(rows) * in, 100 + rows);
      device_buffer<float> d_x(x), d_y(static_cast<size_t>(rows) * out);
      layer.forward(d_x.get(), d_y.get(), rows, nullptr);
      const std::vector<float> y = d_y.download();
      std::vector<double> want(y.size());
      for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t o = 0; o < out; ++o) {
          double acc = 0;
          for (uint32_t i = 0; i < in; ++i) {
            const float wv = c.rounds_to_bf16 ? llmk::kernels::cpu::bf16_to_f32(w_bf16[o * in + i]) : w[o * in + i];
            const float xv = c.rounds_to_bf16
                                 ? llmk::kernels::cpu::bf16_to_f32(llmk::kernels::cpu::f32_to_bf16(x[r * in + i]))
                                 : x[r * in + i];
            acc += static_cast<double>(wv) * xv;
          }
          want[r * out + o] = acc;
        }
      CHECK(max_rel_err(y, want) < (c.rounds_to_bf16 ? kRoundedTol : kF32Tol));
    }
  }
}

TEST_CASE("linear.cublas refuses the CPU, unknown options and a short workspace, naming why",
          "[cublaslt][linear_cublas]") {
  reset_simulator(1);
  llmk::PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  const std::vector<float> w(8 * 4, 0.5f);
  llmk_linear_desc d{};
  d.struct_size = sizeof(d);
  d.name = "test.layer";
  d.in_features = 4;
  d.out_features = 8;
  d.weight_dtype = LLMK_DTYPE_F32;
  d.weight = w.data();
  d.max_rows = 4;
  d.options = "{}";
  d.device = LLMK_DEVICE_CPU;
  d.activation_dtype = LLMK_DTYPE_F32;
  const llmk::Plugin plugin = registry.load("linear.cublas", LLMK_PLUGIN_LINEAR);
  CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("this plugin runs on CUDA, the desc names cpu"));
  d.device = LLMK_DEVICE_CUDA;
  d.options = R"({"dtype":"int3"})";
  CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("option dtype is \"int3\", expected one of auto, f32, bf16, f16"));
  d.options = R"({"precision":"bf16"})";
  CHECK_THROWS_WITH(llmk::LinearImpl(plugin, d), Catch::Contains("unknown plugin option \"precision\""));

  // The C table directly: a workspace shorter than asked for is an error, not a write past it.
  d.options = R"({"dtype":"bf16"})";
  const auto& api = plugin.linear();
  llmk_error err{};
  void* self = api.create(&d, &err);
  REQUIRE(self != nullptr);
  size_t need = 0;
  REQUIRE(api.workspace_bytes(self, 4, &need, &err) == LLMK_OK);
  device_buffer<unsigned char> small(need - 1);
  device_buffer<float> x(16), y(32);
  CHECK(api.forward(self, x.get(), y.get(), 4, small.get(), need - 1, nullptr, &err) == LLMK_ERR_INVALID_ARGUMENT);
  CHECK(std::string(err.message).find("workspace") != std::string::npos);
  api.destroy(self);
}
