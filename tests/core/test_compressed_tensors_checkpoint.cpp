// compressed-tensors integer checkpoints (core/compressed_tensors_checkpoint.hpp)
// against fixtures written by tests/core/compressed_tensors_pack.py from the
// format's definition: the loaded weights equal the packer's own
// dequantization bit for bit (int4 pack-quantized, symmetric and with packed
// zero points; int8 naive-quantized; int8 int-quantized with BF16 channel
// scales, llm-compressor's W8A8), and bad input is refused naming the
// tensor or the config key.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

namespace {

using llmk::test::TempDir;

void pack(const TempDir& dir, const std::string& mode) {
  const std::string cmd = llmk::test::venv_python() + " " + std::string(LLMK_SOURCE_DIR) +
                          "/tests/core/compressed_tensors_pack.py " + dir.path().string() + " " + mode;
  REQUIRE(std::system(cmd.c_str()) == 0);
}

}  // namespace

TEST_CASE("compressed-tensors int4, int8 and W8A8 checkpoints load to the packer's own dequantized weights, bit for bit",
          "[checkpoint][compressed_tensors]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  for (const char* mode : {"int4_group", "int4_group_asym", "int8_naive", "int8_w8a8"}) {
    INFO(mode);
    TempDir dir;
    pack(dir, mode);
    const auto ckpt = llmk::load_checkpoint(dir.path());
    if (std::string(mode) == "int8_w8a8") {  // tokenizer_config.json and generation_config.json apply
      CHECK_FALSE(ckpt->config().add_bos_token);
      CHECK(ckpt->config().eos_token_ids == std::vector<int32_t>{2, 7});
    }
    const llmk::SafetensorsFile expected(dir.path() / "expected.safetensors");
    REQUIRE(expected.entries().size() == ckpt->tensors().size());
    for (const auto& [name, e] : expected.entries()) {
      INFO(name);
      const llmk::TensorView& t = ckpt->tensor(name);
      REQUIRE(t.dtype == llmk::DType::f32);
      REQUIRE(t.shape == e.shape);
      CHECK(std::memcmp(t.data, expected.data(e), t.nbytes()) == 0);
    }
  }
}

TEST_CASE("Bad compressed-tensors checkpoints are refused naming the tensor or the config key",
          "[checkpoint][compressed_tensors]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  struct Case {
    const char* mode;
    llmk::ErrorCode code;
    const char* names;
    const char* what;
  };
  for (const Case c : {Case{"missing_scale", llmk::ErrorCode::bad_checkpoint, "'model.layers.0.self_attn.o_proj.weight'",
                            "weight_scale"},
                       Case{"shape_mismatch", llmk::ErrorCode::bad_checkpoint, "'model.layers.0.mlp.up_proj.weight_shape'",
                            "does not match"},
                       Case{"unknown_format", llmk::ErrorCode::unsupported, "quantization_config.format", "marlin-24"}}) {
    INFO(c.mode);
    TempDir dir;
    pack(dir, c.mode);
    try {
      llmk::load_checkpoint(dir.path());
      FAIL("the checkpoint loaded");
    } catch (const llmk::Error& e) {
      CHECK(e.code() == c.code);
      CHECK_THAT(std::string(e.what()), Catch::Contains(c.names) && Catch::Contains(c.what));
    }
  }
}
