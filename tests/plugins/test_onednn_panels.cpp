// oneDNN's blocked matmul over the plugins' packed panels
// (plugins/cpu_common/onednn_panels.hpp): the panels are byte for byte the
// oneDNN layouts it is told they are (checked against oneDNN's own reorder,
// which runs on any x86 CPU), and its products match a float64 (BF16) or
// exact integer (W8A8) reference, the row buckets' padding included: on
// oneDNN's blocked kernel where this CPU has one, else on its reference code,
// which reads the same layout (AVX2 CPUs: int8 only; oneDNN 2.6 has no BF16
// matmul there at all). The plugins that use it are checked in
// test_linear_dense.cpp and test_quant.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/dtype.hpp"
#include "kernels/cpu/linear_bf16_pairs.hpp"
#include "kernels/cpu/linear_w8a8.hpp"
#include "plugins/cpu_common/onednn_panels.hpp"
#include "support/skip.hpp"

namespace {

using dnnl::memory;
using llmk::cpu_common::OnednnPanelsMatmul;
using llmk::cpu_common::PanelsLayout;

// oneDNN's reorder of the plain weight w [n, k] (viewed as its transpose,
// [k, n] with strides {1, k}) into `tag`: the bytes its blocked matmul reads.
std::vector<uint8_t> onednn_blocked(const void* w, memory::data_type dt, int64_t k, int64_t n, memory::format_tag tag) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  memory src(memory::desc({k, n}, dt, memory::dims{1, k}), eng, const_cast<void*>(w));
  memory dst(memory::desc({k, n}, dt, tag), eng);
  dnnl::reorder(src, dst).execute(s, src, dst);
  s.wait();
  const auto* p = static_cast<const uint8_t*>(dst.get_data_handle());
  return {p, p + dst.get_desc().get_size()};
}

std::vector<uint16_t> random_bf16(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = llmk::f32_to_bf16(normal(rng));
  return v;
}

// A random normal weight [n, k] quantized and packed as W8A8 panels.
std::vector<int8_t> random_w8a8_panels(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(k * n));
  for (auto& x : w) x = normal(rng);
  const auto padded_out = static_cast<size_t>(llmk::kernels::cpu::num_panels16(n) * llmk::kernels::cpu::kPanels16Width);
  std::vector<int8_t> packed(llmk::kernels::cpu::w8a8_size(n, k));
  std::vector<float> scale(padded_out);
  std::vector<int32_t> row_sum(padded_out);
  llmk::kernels::cpu::pack_w8a8(w.data(), n, k, packed.data(), scale.data(), row_sum.data());
  return packed;
}

}  // namespace

TEST_CASE("BF16 k-pair panels are oneDNN's BA16a64b2a layout", "[onednn]") {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{768, 2304}, {64, 100}, {2048, 768}, {32, 1}, {96, 65}}) {
    INFO("in " << k << " out " << n);
    const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(k * n), static_cast<uint32_t>(k + n));
    std::vector<uint16_t> packed(llmk::kernels::cpu::bf16_pairs_size(n, k));
    llmk::kernels::cpu::pack_bf16_pairs(w.data(), n, k, packed.data());
    const std::vector<uint8_t> blocked = onednn_blocked(w.data(), memory::data_type::bf16, k, n,
                                                        memory::format_tag::BA16a64b2a);
    REQUIRE(blocked.size() == packed.size() * sizeof(uint16_t));
    CHECK(std::memcmp(blocked.data(), packed.data(), blocked.size()) == 0);
  }
}

TEST_CASE("W8A8 panels are oneDNN's BA16a16b4a layout", "[onednn]") {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{768, 2304}, {64, 20}, {2048, 768}, {64, 1}, {192, 33}}) {
    INFO("in " << k << " out " << n);
    const std::vector<int8_t> packed = random_w8a8_panels(k, n, static_cast<uint32_t>(k * 3 + n));
    std::vector<int8_t> q(static_cast<size_t>(k * n));  // the quantized weight, read back as [n, k]
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < k; ++i)
        q[static_cast<size_t>(c * k + i)] = llmk::kernels::cpu::w8a8_packed_at(packed.data(), k, c, i);
    const std::vector<uint8_t> blocked = onednn_blocked(q.data(), memory::data_type::s8, k, n,
                                                        memory::format_tag::BA16a16b4a);
    REQUIRE(blocked.size() == packed.size());
    CHECK(std::memcmp(blocked.data(), packed.data(), blocked.size()) == 0);
  }
}

TEST_CASE("oneDNN's matmul refuses what it cannot read as panels, with the reason", "[onednn]") {
  // oneDNN pads K to its whole block (32 for BF16 pairs, 64 for W8A8); the panels do not.
  const std::vector<uint16_t> pairs(llmk::kernels::cpu::bf16_pairs_size(64, 48));
  std::string why;
  CHECK(OnednnPanelsMatmul::make(PanelsLayout::bf16_pairs, pairs.data(), pairs.size() * 2, 48, 64, 64, 1, why) ==
        nullptr);
  CHECK(why.find("not a multiple of 32") != std::string::npos);
  const std::vector<int8_t> w8(llmk::kernels::cpu::w8a8_size(64, 96));
  CHECK(OnednnPanelsMatmul::make(PanelsLayout::w8a8, w8.data(), w8.size(), 96, 64, 64, 1, why) == nullptr);
  CHECK(why.find("not a multiple of 64") != std::string::npos);
}

TEST_CASE("amx_available never claims AMX this CPU lacks", "[onednn]") {
  // The plugins' default choice (matmul auto) rests on it.
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  if (text.find("amx_tile") == std::string::npos) CHECK_FALSE(OnednnPanelsMatmul::amx_available());
  // A matmul oneDNN runs on AMX means AMX is available.
  const std::vector<int8_t> w8(llmk::kernels::cpu::w8a8_size(64, 64));
  std::string why;
  auto mm = OnednnPanelsMatmul::make(PanelsLayout::w8a8, w8.data(), w8.size(), 64, 64, 64, 1, why, true);
  REQUIRE(mm != nullptr);
  if (mm->on_amx()) CHECK(OnednnPanelsMatmul::amx_available());
}

TEST_CASE("oneDNN's matmul row buckets", "[onednn]") {
  CHECK(OnednnPanelsMatmul::padded_rows(1) == 16);
  CHECK(OnednnPanelsMatmul::padded_rows(16) == 16);
  CHECK(OnednnPanelsMatmul::padded_rows(17) == 32);
  CHECK(OnednnPanelsMatmul::padded_rows(128) == 128);
  CHECK(OnednnPanelsMatmul::padded_rows(129) == 192);
  CHECK(OnednnPanelsMatmul::padded_rows(2048) == 2048);
  for (int64_t rows = 1; rows <= 4096; ++rows) {
    const int64_t p = OnednnPanelsMatmul::padded_rows(rows);
    REQUIRE(p >= rows);
    REQUIRE(p - rows < (rows <= 128 ? 16 : 64));
    if (rows > 128) REQUIRE(3 * (p - rows) < p);  // at most a third of the bucket
  }
}

TEST_CASE("oneDNN's blocked BF16 matmul over k-pair panels matches a float64 reference", "[onednn]") {
  const int64_t k = 256, n = 200, max_rows = 256;
  const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(k * n), 7);
  std::vector<uint16_t> packed(llmk::kernels::cpu::bf16_pairs_size(n, k));
  llmk::kernels::cpu::pack_bf16_pairs(w.data(), n, k, packed.data());
  std::string why;
  auto mm =
      OnednnPanelsMatmul::make(PanelsLayout::bf16_pairs, packed.data(), packed.size() * 2, k, n, max_rows, 2, why);
  // Without a blocked kernel here, oneDNN's reference code reads the same layout.
  if (!mm) mm = OnednnPanelsMatmul::make(PanelsLayout::bf16_pairs, packed.data(), packed.size() * 2, k, n, max_rows, 2,
                                         why, /*accept_reference=*/true);
  if (!mm) LLMK_SKIP("no BF16 matmul in oneDNN on this CPU: " + why);
  INFO("oneDNN kernel " << mm->implementation());
  for (int64_t rows : {16, 17, 30, 128, 200}) {  // 17 and 30 share a bucket
    INFO(rows << " rows");
    const int64_t padded = OnednnPanelsMatmul::padded_rows(rows);
    std::vector<uint16_t> x = random_bf16(static_cast<size_t>(padded * k), static_cast<uint32_t>(rows));
    std::vector<float> y(static_cast<size_t>(padded * n), NAN);
    mm->multiply(x.data(), rows, y.data());
    double worst = 0.0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t c = 0; c < n; ++c) {
        double ref = 0.0, mag = 1e-30;
        for (int64_t i = 0; i < k; ++i) {
          const double p = static_cast<double>(llmk::bf16_to_f32(x[static_cast<size_t>(m * k + i)])) *
                           llmk::bf16_to_f32(w[static_cast<size_t>(c * k + i)]);
          ref += p, mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(y[static_cast<size_t>(m * n + c)] - ref) / mag);
      }
    CHECK(worst < 1e-5);  // exact products, F32 sums
  }
}

TEST_CASE("oneDNN's blocked int8 matmul over W8A8 panels gives the exact integer sums", "[onednn]") {
  const int64_t k = 256, n = 200, max_rows = 256;
  const std::vector<int8_t> packed = random_w8a8_panels(k, n, 3);
  std::mt19937 rng(4);
  std::string why;
  auto mm = OnednnPanelsMatmul::make(PanelsLayout::w8a8, packed.data(), packed.size(), k, n, max_rows, 2, why);
  // Without a blocked kernel here, oneDNN's reference code reads the same layout.
  if (!mm) mm = OnednnPanelsMatmul::make(PanelsLayout::w8a8, packed.data(), packed.size(), k, n, max_rows, 2, why,
                                         /*accept_reference=*/true);
  if (!mm) LLMK_SKIP("no int8 matmul in oneDNN on this CPU: " + why);
  INFO("oneDNN kernel " << mm->implementation());
  // 33 and 40 share a bucket: its primitive runs again on other buffers.
  for (int64_t rows : {16, 33, 40, 128, 256}) {
    INFO(rows << " rows");
    const int64_t padded = OnednnPanelsMatmul::padded_rows(rows);
    std::vector<uint8_t> x(static_cast<size_t>(padded * k));
    for (auto& v : x) v = static_cast<uint8_t>(rng());
    std::vector<int32_t> y(static_cast<size_t>(padded * n), -1);
    mm->multiply(x.data(), rows, y.data());
    int64_t wrong = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t c = 0; c < n; ++c) {
        int64_t ref = 0;
        for (int64_t i = 0; i < k; ++i)
          ref += int64_t{x[static_cast<size_t>(m * k + i)]} *
                 llmk::kernels::cpu::w8a8_packed_at(packed.data(), k, c, i);
        wrong += y[static_cast<size_t>(m * n + c)] != ref;
      }
    CHECK(wrong == 0);
  }
}
