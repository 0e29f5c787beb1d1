// The quantized linear plugins through their C tables, loaded from the build
// tree: per-layer float fallback, options, errors and weight memory.
#include <catch2/catch.hpp>

#include <boost/dll/import.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "core/dtype.hpp"
#include "plugins/api/llmk_linear.h"
#include "quant/quant_test_util.hpp"
#include "support/linear_call.hpp"

namespace {

struct LoadedLinear {
  std::function<const llmk_plugin_info*()> entry;  // co-owns the library
  const llmk_linear_api* api = nullptr;
  const llmk_plugin_info* info = nullptr;
};

LoadedLinear load(const std::string& name) {
  std::string stem = name;
  for (char& c : stem) c = c == '.' ? '_' : c;
  const std::string path = std::string(LLMK_PLUGIN_BUILD_DIR) + "/libllmk_" + stem + ".so";
  LoadedLinear l;
  l.entry = boost::dll::import_alias<const llmk_plugin_info*()>(path, "llmk_plugin_entry");
  l.info = l.entry();
  l.api = static_cast<const llmk_linear_api*>(l.info->api);
  return l;
}

llmk_linear_desc make_desc(const char* name, const std::vector<float>& w, uint32_t out, uint32_t in,
                           const char* options) {
  llmk_linear_desc d{};
  d.struct_size = sizeof(d);
  d.name = name;
  d.in_features = in;
  d.out_features = out;
  d.weight_dtype = LLMK_DTYPE_F32;
  d.weight = w.data();
  d.weight_outlives = 0;
  d.max_rows = 4;
  d.num_threads = 2;
  d.options = options;
  return d;
}

// Max |y - x W^T| over all outputs, relative to max |x W^T|.
double relative_error(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& w,
                      int64_t rows, int64_t in, int64_t out) {
  double err = 0.0, ref_max = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < out; ++n) {
      double ref = 0.0;
      for (int64_t k = 0; k < in; ++k) ref += double(x[r * in + k]) * w[n * in + k];
      err = std::max(err, std::fabs(y[r * out + n] - ref));
      ref_max = std::max(ref_max, std::fabs(ref));
    }
  return err / ref_max;
}

struct RunResult {
  std::vector<float> y;
  size_t weight_bytes;
};

RunResult run(const LoadedLinear& l, const llmk_linear_desc& d, const std::vector<float>& x, uint32_t rows) {
  llmk_error err{};
  void* self = l.api->create(&d, &err);
  REQUIRE(self != nullptr);
  RunResult r{std::vector<float>(size_t(rows) * d.out_features), llmk::test::linear_weight_bytes(*l.api, self)};
  REQUIRE(llmk::test::linear_forward(*l.api, self, x.data(), r.y.data(), rows, &err) == LLMK_OK);
  l.api->destroy(self);
  return r;
}

int supports(const LoadedLinear& l, const llmk_linear_desc& d, char* why, size_t n) {
  return l.api->supports(&d, why, n);
}

}  // namespace

TEST_CASE("Quantized linear plugins identify themselves as linear plugins", "[quant][plugin]") {
  for (const char* name : {"linear.int8", "linear.int4", "linear.uint8_zp"}) {
    const LoadedLinear l = load(name);
    REQUIRE(std::string(l.info->name) == name);
    REQUIRE(l.info->kind == LLMK_PLUGIN_LINEAR);
    REQUIRE(l.info->api_version == LLMK_LINEAR_API_VERSION);
    REQUIRE(l.api->struct_size == sizeof(llmk_linear_api));
  }
}

TEST_CASE("linear.int8 keeps o_proj in float by default and quantizes other layers", "[quant][plugin]") {
  const LoadedLinear l = load("linear.int8");
  const uint32_t in = 200, out = 70, rows = 3;
  const auto w = llmk::test::random_matrix(out, in, 101);
  const auto x = llmk::test::random_matrix(rows, in, 102);
  const auto f = run(l, make_desc("model.layers.0.self_attn.o_proj", w, out, in, "{}"), x, rows);
  const auto q = run(l, make_desc("model.layers.0.mlp.down_proj", w, out, in, "{}"), x, rows);
  REQUIRE(relative_error(f.y, x, w, rows, in, out) < 1e-6);
  const double qerr = relative_error(q.y, x, w, rows, in, out);
  REQUIRE(qerr > 1e-5);  // really quantized
  REQUIRE(qerr < 0.03);
  REQUIRE(f.weight_bytes >= size_t(out) * in * 4);
  REQUIRE(q.weight_bytes < size_t(out) * in * 4 / 3);
  // An explicit list replaces the default.
  const auto q2 = run(l, make_desc("model.layers.0.self_attn.o_proj", w, out, in, R"({"float_layers":[]})"), x, rows);
  REQUIRE(relative_error(q2.y, x, w, rows, in, out) > 1e-5);
  const auto f2 = run(l, make_desc("lm_head", w, out, in, R"({"float_layers":["lm_head"]})"), x, rows);
  REQUIRE(relative_error(f2.y, x, w, rows, in, out) < 1e-6);
}

TEST_CASE("linear.int8's rows through oneDNN's int8 matmul give its own kernels' bits", "[quant][plugin]") {
  const LoadedLinear l = load("linear.int8");
  const uint32_t in = 256, out = 200;
  const auto w = llmk::test::random_matrix(out, in, 131);
  auto desc = [&](const char* options) {
    llmk_linear_desc d = make_desc("model.layers.0.mlp.down_proj", w, out, in, options);
    d.max_rows = 200;
    return d;
  };
  // oneDNN's blocked kernel where this CPU has one (AMX, AVX512-VNNI), else refused with the reason.
  llmk_error err{};
  const llmk_linear_desc blocked_desc = desc(R"({"matmul":"onednn"})");
  void* blocked = l.api->create(&blocked_desc, &err);
  const bool has_blocked = blocked != nullptr;
  if (has_blocked) l.api->destroy(blocked);
  else CHECK(std::string(err.message).find("matmul onednn: oneDNN") != std::string::npos);
  for (uint32_t rows : {15u, 16u, 17u, 100u, 200u}) {
    INFO(rows << " rows");
    const auto x = llmk::test::random_matrix(rows, in, 132 + rows);
    const auto own = run(l, desc(R"({"matmul":"own"})"), x, rows);
    // Below 16 rows the plugin's own kernels run whatever the option; from
    // there oneDNN's reference code (or its blocked kernel) sums the same integers.
    const auto reference = run(l, desc(R"({"matmul":"onednn_reference"})"), x, rows);
    CHECK(own.y == reference.y);
    if (has_blocked) CHECK(own.y == run(l, desc(R"({"matmul":"onednn"})"), x, rows).y);
    CHECK(relative_error(reference.y, x, w, rows, in, out) < 0.03);
  }
  // A width oneDNN's layout pads differently: asked for, refused with the reason.
  const auto w96 = llmk::test::random_matrix(out, 96, 133);
  llmk_linear_desc odd = make_desc("model.layers.0.mlp.down_proj", w96, out, 96, R"({"matmul":"onednn_reference"})");
  odd.max_rows = 64;
  CHECK(l.api->create(&odd, &err) == nullptr);
  CHECK(std::string(err.message).find("not a multiple of 64") != std::string::npos);
  odd.options = R"({"matmul":"amx"})";
  CHECK(l.api->create(&odd, &err) == nullptr);
  CHECK(std::string(err.message).find("matmul") != std::string::npos);
}

TEST_CASE("linear.int4's rows on the AMX tile kernel give its vector kernels' bits", "[quant][plugin][amx]") {
  const LoadedLinear l = load("linear.int4");
  const uint32_t in = 384, out = 72;
  const auto w = llmk::test::random_matrix(out, in, 141);
  auto desc = [&](const char* options, uint32_t in_features = 384) {
    llmk_linear_desc d = make_desc("model.layers.0.mlp.down_proj", w, out, in_features, options);
    d.max_rows = 40;
    return d;
  };
  // Where this plugin file's level has the tile kernel (AVX-512), its model
  // of the tile unit; the unit itself where the CPU has one. Else refused with the reason.
  llmk_error err{};
  auto creates = [&](const llmk_linear_desc& d) {
    void* p = l.api->create(&d, &err);
    if (p != nullptr) l.api->destroy(p);
    return p != nullptr;
  };
  const bool model = creates(desc(R"({"matmul":"amx_model"})"));
  if (!model) CHECK(std::string(err.message).find("matmul amx_model: this plugin file's CPU level has no tile kernel") !=
                    std::string::npos);
  const bool unit = creates(desc(R"({"matmul":"amx"})"));
  if (!unit) CHECK(std::string(err.message).find("matmul amx: this CPU has no AMX-INT8 tile unit") != std::string::npos);
  for (uint32_t rows : {1u, 2u, 16u, 17u, 40u}) {
    INFO(rows << " rows");
    const auto x = llmk::test::random_matrix(rows, in, 142 + rows);
    const auto own = run(l, desc(R"({"matmul":"own"})"), x, rows);
    CHECK(relative_error(own.y, x, w, rows, in, out) < 0.35);  // int4 on uniform random weights: a product, not noise
    CHECK(own.y == run(l, desc("{}"), x, rows).y);  // auto: the tiles or the vector kernels, the same bits
    if (model) CHECK(own.y == run(l, desc(R"({"matmul":"amx_model"})"), x, rows).y);
    if (unit) CHECK(own.y == run(l, desc(R"({"matmul":"amx"})"), x, rows).y);
  }
  // Asked for by name on shapes the tiles do not take, or with f32 activations: refused with the reason.
  const auto w96 = llmk::test::random_matrix(out, 96, 143);
  llmk_linear_desc odd = make_desc("model.layers.0.mlp.down_proj", w96, out, 96, R"({"matmul":"amx_model"})");
  CHECK(l.api->create(&odd, &err) == nullptr);
  CHECK(std::string(err.message).find("must be multiples of 64") != std::string::npos);
  const llmk_linear_desc f32_rows = desc(R"({"matmul":"amx_model","activations":"f32"})");
  CHECK(l.api->create(&f32_rows, &err) == nullptr);
  CHECK(std::string(err.message).find("the tiles multiply int8 activations") != std::string::npos);
  const llmk_linear_desc unknown = desc(R"({"matmul":"tiles"})");
  CHECK(l.api->create(&unknown, &err) == nullptr);
  CHECK(std::string(err.message).find("matmul") != std::string::npos);
  // auto on a shape the tiles do not take: the vector kernels, no refusal; nor for a layer kept in float.
  odd.options = "{}";
  CHECK(creates(odd));
  odd.options = R"({"matmul":"amx_model","float_layers":["down_proj"]})";
  CHECK(creates(odd));
  odd.options = R"({"matmul":"tiles","float_layers":["down_proj"]})";  // a bad value is refused all the same
  CHECK_FALSE(creates(odd));
  CHECK(std::string(err.message).find("matmul") != std::string::npos);
}

TEST_CASE("A layer kept in float keeps a bf16 checkpoint's weights in bf16", "[quant][plugin]") {
  const LoadedLinear l = load("linear.int8");
  const uint32_t in = 96, out = 40, rows = 2;
  const auto w = llmk::test::random_matrix(out, in, 121);
  const auto x = llmk::test::random_matrix(rows, in, 122);
  std::vector<uint16_t> bits(w.size());
  std::vector<float> stored(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    bits[i] = llmk::f32_to_bf16(w[i]);
    stored[i] = llmk::bf16_to_f32(bits[i]);
  }
  llmk_linear_desc d = make_desc("model.layers.1.self_attn.o_proj", w, out, in, "{}");
  d.weight_dtype = LLMK_DTYPE_BF16;
  d.weight = bits.data();
  const auto f = run(l, d, x, rows);
  REQUIRE(f.weight_bytes == size_t(48) * in * 2);  // 40 channels padded to 48, two bytes each
  REQUIRE(relative_error(f.y, x, stored, rows, in, out) < 1e-6);
}

TEST_CASE("linear.int4 and linear.uint8_zp quantize with their options and report packed sizes", "[quant][plugin]") {
  const uint32_t in = 256, out = 48, rows = 2;
  const auto w = llmk::test::random_matrix(out, in, 111);
  const auto x = llmk::test::random_matrix(rows, in, 112);
  const LoadedLinear i4 = load("linear.int4");
  const auto g128 = run(i4, make_desc("mlp.up_proj", w, out, in, "{}"), x, rows);
  const auto g32 = run(i4, make_desc("mlp.up_proj", w, out, in, R"({"group_size":32})"), x, rows);
  // Packed nibbles plus one f32 scale and one u8 zero point per group.
  REQUIRE(g128.weight_bytes == size_t(out) * in / 2 + size_t(out) * 2 * 5);
  REQUIRE(g32.weight_bytes == size_t(out) * in / 2 + size_t(out) * 8 * 5);
  REQUIRE(relative_error(g32.y, x, w, rows, in, out) < relative_error(g128.y, x, w, rows, in, out));
  REQUIRE(relative_error(g128.y, x, w, rows, in, out) < 0.2);
  // Plain min/max ranges instead of the default MSE ones: packed alike. (Which
  // is closer on one layer's output depends on the inputs: clipping trades the
  // largest weights' error for a finer step; tests/quant/test_weight_only.cpp
  // checks the weight error.)
  const auto mm = run(i4, make_desc("mlp.up_proj", w, out, in, R"({"range":"min_max"})"), x, rows);
  REQUIRE(mm.weight_bytes == g128.weight_bytes);
  REQUIRE(relative_error(mm.y, x, w, rows, in, out) < 0.2);
  // float_layers keeps the named layer in float.
  // Rows are rounded to int8 per group by default ("f32" keeps them exact), the same way alone (decode) and
  // among other rows (prefill): a row's outputs are the same bits either way.
  const auto a32 = run(i4, make_desc("mlp.up_proj", w, out, in, R"({"activations":"f32"})"), x, rows);
  REQUIRE(a32.weight_bytes == g128.weight_bytes);
  REQUIRE(a32.y != g128.y);
  REQUIRE(relative_error(a32.y, x, w, rows, in, out) < 0.2);
  REQUIRE(run(i4, make_desc("mlp.up_proj", w, out, in, R"({"activations":"int8"})"), x, rows).y == g128.y);
  for (uint32_t r = 0; r < rows; ++r) {
    const std::vector<float> xr(x.begin() + r * in, x.begin() + (r + 1) * in);
    const auto alone = run(i4, make_desc("mlp.up_proj", w, out, in, "{}"), xr, 1);
    REQUIRE(std::vector<float>(g128.y.begin() + r * out, g128.y.begin() + (r + 1) * out) == alone.y);
  }
  const auto head = run(i4, make_desc("lm_head", w, out, in, R"({"float_layers":["lm_head"]})"), x, rows);
  REQUIRE(relative_error(head.y, x, w, rows, in, out) < 1e-6);
  REQUIRE(head.weight_bytes == size_t(out) * in * 4);

  const LoadedLinear u8 = load("linear.uint8_zp");
  const auto pc = run(u8, make_desc("mlp.up_proj", w, out, in, "{}"), x, rows);
  const auto pt = run(u8, make_desc("mlp.up_proj", w, out, in, R"({"per_channel":false})"), x, rows);
  REQUIRE(pc.weight_bytes == size_t(out) * in + size_t(out) * 5);
  REQUIRE(pt.weight_bytes == size_t(out) * in + 5);
  REQUIRE(relative_error(pc.y, x, w, rows, in, out) < 0.02);
  REQUIRE(relative_error(pt.y, x, w, rows, in, out) < 0.05);
}

TEST_CASE("Quantized linear plugins refuse bad options and say why", "[quant][plugin]") {
  const std::vector<float> w(64 * 20, 1.0f);
  char why[256] = {};
  const LoadedLinear i8 = load("linear.int8");
  REQUIRE(supports(i8, make_desc("a.q_proj", w, 20, 64, R"({"float_layer":["o_proj"]})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("float_layer") != std::string::npos);
  REQUIRE(supports(i8, make_desc("a.q_proj", w, 20, 64, "not json"), why, sizeof(why)) == 0);
  REQUIRE(supports(i8, make_desc("a.q_proj", w, 20, 64, "{}"), why, sizeof(why)) == 1);

  const LoadedLinear i4 = load("linear.int4");
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"group_size":12})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("group_size") != std::string::npos);
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"range":"percentile"})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("range") != std::string::npos);
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"range":"min_max"})"), why, sizeof(why)) == 1);
  // Capped at in_features: a group of 100 over 64 inputs is one group.
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"group_size":100})"), why, sizeof(why)) == 1);
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"activations":"int4"})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("activations") != std::string::npos);
  REQUIRE(supports(i4, make_desc("a.q_proj", w, 20, 64, R"({"activations":"int8"})"), why, sizeof(why)) == 1);

  const LoadedLinear u8 = load("linear.uint8_zp");
  REQUIRE(supports(u8, make_desc("a.q_proj", w, 20, 64, R"({"per_channel":"yes"})"), why, sizeof(why)) == 0);
  llmk_error err{};
  const auto bad = make_desc("a.q_proj", w, 20, 64, R"({"per_channel":"yes"})");
  REQUIRE(u8.api->create(&bad, &err) == nullptr);
  REQUIRE(err.status == LLMK_ERR_INVALID_ARGUMENT);
  REQUIRE(std::string(err.message).find("a.q_proj") != std::string::npos);
}

TEST_CASE("linear.lut4 refuses bad options and other ggml blocks, naming the layer and the option",
          "[quant][plugin][lut4]") {
  const std::vector<float> w(64 * 20, 1.0f);
  char why[256] = {};
  const LoadedLinear l = load("linear.lut4");
  REQUIRE(l.info->api_version == LLMK_LINEAR_API_VERSION);
  REQUIRE(supports(l, make_desc("a.q_proj", w, 20, 64, R"({"codebook":"fp4"})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("codebook") != std::string::npos);
  REQUIRE(supports(l, make_desc("a.q_proj", w, 20, 64, R"({"block_size":48})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("block_size") != std::string::npos);
  REQUIRE(std::string(why).find("a.q_proj") != std::string::npos);
  REQUIRE(supports(l, make_desc("a.q_proj", w, 20, 64, R"({"scale":"mse"})"), why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("scale") != std::string::npos);
  REQUIRE(supports(l, make_desc("a.q_proj", w, 20, 64, R"({"codebook":"nf4","block_size":128,"activations":"f32"})"),
                   why, sizeof(why)) == 1);
  // A GGUF Q4_0 weight (ggml type 2) is not IQ4_NL: refused, so the host routes it elsewhere.
  auto q4 = make_desc("a.q_proj", w, 20, 64, "{}");
  q4.weight_dtype = LLMK_DTYPE_GGML_BASE + 2;
  REQUIRE(supports(l, q4, why, sizeof(why)) == 0);
  REQUIRE(std::string(why).find("IQ4_NL") != std::string::npos);
}

TEST_CASE("linear.lut4 keeps named layers in float and stores 4.5 bits per weight otherwise", "[quant][plugin][lut4]") {
  const int64_t out = 40, in = 256;
  const std::vector<float> w = llmk::test::random_matrix(out, in, 5);
  const std::vector<float> x = llmk::test::random_matrix(3, in, 6);
  const LoadedLinear l = load("linear.lut4");
  const RunResult f = run(l, make_desc("m.lm_head", w, out, in, R"({"float_layers":["lm_head"]})"), x, 3);
  CHECK(relative_error(f.y, x, w, 3, in, out) < 1e-5);
  for (const char* options : {"{}", R"({"codebook":"nf4"})"}) {
    INFO(options);
    const RunResult q = run(l, make_desc("m.lm_head", w, out, in, options), x, 3);
    // 4.5 bits per weight, the 40 channels padded to three 16-channel panels (int8 rows' layout).
    CHECK(q.weight_bytes == size_t((out + 15) / 16 * 16 * in / 64 * 36));
    const RunResult u = run(l, make_desc("m.lm_head", w, out, in, R"({"activations":"f32"})"), x, 3);
    CHECK(u.weight_bytes == size_t(out * in / 64 * 36));  // f32 rows: the unpadded units
    const double err = relative_error(q.y, x, w, 3, in, out);
    // 4-bit weights on heavy-tailed rows (the kernels' float64 checks are
    // tests/kernels/test_linear_lut4.cpp): quantized, and not garbage.
    CHECK(err > 1e-3);
    CHECK(err < 0.6);
  }
}
