// bitsandbytes 4-bit checkpoints (core/bnb_checkpoint.hpp) against fixtures
// written by tests/core/bnb_pack.py from the format's published layout: the
// loaded weights equal the packer's own dequantization bit for bit, NF4
// requantized by the lut4 kernels at load gives the file's values back, and
// bad input is refused naming the tensor.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "kernels/cpu/linear_lut4.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

namespace {

using llmk::test::TempDir;

void pack(const TempDir& dir, const std::string& mode) {
  const std::string cmd = llmk::test::venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/core/bnb_pack.py " +
                          dir.path().string() + " " + mode;
  REQUIRE(std::system(cmd.c_str()) == 0);
}

std::string load_error(const TempDir& dir) {
  try {
    llmk::load_checkpoint(dir.path());
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::bad_checkpoint);
    return e.what();
  }
  FAIL("the checkpoint loaded");
  return "";
}

}  // namespace

TEST_CASE("A bitsandbytes NF4 checkpoint loads to the packer's own dequantized weights, bit for bit",
          "[checkpoint][bnb]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  TempDir dir;
  pack(dir, "good");
  const auto ckpt = llmk::load_checkpoint(dir.path());
  const llmk::SafetensorsFile expected(dir.path() / "expected.safetensors");
  REQUIRE(expected.entries().size() == ckpt->tensors().size());
  for (const auto& [name, e] : expected.entries()) {
    INFO(name);
    const llmk::TensorView& t = ckpt->tensor(name);
    REQUIRE(t.dtype == llmk::DType::f32);
    REQUIRE(t.shape == e.shape);
    CHECK(std::memcmp(t.data, expected.data(e), t.nbytes()) == 0);
  }
  // The config came through with quantization_config set aside.
  CHECK(ckpt->config().hidden_size == 64);
  CHECK(ckpt->config().num_kv_heads == 2);
}

TEST_CASE("A bitsandbytes checkpoint takes its folder's generation_config.json and tokenizer_config.json",
          "[checkpoint][bnb]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  TempDir dir;
  pack(dir, "good");
  const llmk::ModelConfig plain = llmk::load_checkpoint(dir.path())->config();
  REQUIRE(plain.eos_token_ids != std::vector<int32_t>({5, 7}));
  REQUIRE(plain.add_bos_token);
  std::ofstream(dir.path() / "generation_config.json") << R"({"bos_token_id": 3, "eos_token_id": [5, 7]})";
  std::ofstream(dir.path() / "tokenizer_config.json") << R"({"add_bos_token": false})";
  const llmk::ModelConfig c = llmk::load_checkpoint(dir.path())->config();
  CHECK(c.bos_token_id == 3);
  CHECK(c.eos_token_ids == std::vector<int32_t>({5, 7}));
  CHECK_FALSE(c.add_bos_token);
}

TEST_CASE("NF4 requantized by the lut4 kernels at load gives a bitsandbytes file's values back", "[checkpoint][bnb]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  using namespace llmk::kernels::cpu;
  TempDir dir;
  pack(dir, "good");
  const auto ckpt = llmk::load_checkpoint(dir.path());
  // Rows of whole 64-value blocks (in_features 64 and 128): the block's
  // largest weight is +-absmax exactly, so absmax scaling finds the codes.
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                           "model.layers.0.mlp.down_proj.weight"}) {
    INFO(name);
    const llmk::TensorView& t = ckpt->tensor(name);
    const Lut4Shape s{t.shape[1], t.shape[0], 64};
    std::vector<uint8_t> q(static_cast<size_t>(t.numel())), packed(lut4_size(s));
    std::vector<float> scale(static_cast<size_t>(s.out_features * s.num_blocks()));
    const auto* w = static_cast<const float*>(t.data);
    quantize_lut4(w, s, Lut4Book::nf4, Lut4Scale::absmax, q.data(), scale.data(), 1);
    pack_lut4(q.data(), scale.data(), s, packed.data());
    const Lut4Codebook& c = lut4_codebook(Lut4Book::nf4);
    for (int64_t n = 0; n < s.out_features; ++n)
      for (int64_t k = 0; k < s.in_features; ++k)
        REQUIRE(lut4_scale_at(packed.data(), s, n, k) * c.values[lut4_index_at(packed.data(), s, n, k)] ==
                w[n * s.in_features + k]);
  }
}

TEST_CASE("Bad bitsandbytes checkpoints are refused naming the tensor and what is wrong", "[checkpoint][bnb]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  struct Case {
    const char* mode;
    const char* tensor;
    const char* what;
  };
  for (const Case c : {Case{"no_absmax", "model.layers.0.self_attn.k_proj.weight", "absmax"},
                       Case{"quant_map_15", "model.layers.0.self_attn.o_proj.weight.quant_map", "expected 16"},
                       Case{"shape_mismatch", "model.layers.0.mlp.up_proj.weight", "does not match"},
                       Case{"nested_missing", "model.layers.0.mlp.gate_proj.weight", "nested_absmax"}}) {
    INFO(c.mode);
    TempDir dir;
    pack(dir, c.mode);
    const std::string why = load_error(dir);
    CHECK_THAT(why, Catch::Contains(std::string("'") + c.tensor + "'") && Catch::Contains(c.what));
  }
}
