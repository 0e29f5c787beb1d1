// compressed-tensors integer checkpoints (core/compressed_tensors_checkpoint.hpp)
// against fixtures written by tests/core/compressed_tensors_pack.py from the
// format's definition: the loaded weights equal the packer's own
// dequantization bit for bit (int4 pack-quantized, symmetric and with packed
// zero points, kept as integer groups; int8 naive-quantized; int8
// int-quantized with BF16 channel scales, llm-compressor's W8A8), a model
// computes on the int4 integers (linear.int4) and agrees with a float twin
// of the dequantized weights, and bad input is refused naming the tensor
// or the config key.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

namespace {

using llmk::test::TempDir;

void pack(const TempDir& dir, const std::string& mode) {
  const std::string cmd = llmk::test::venv_python() + " " + std::string(LLMK_SOURCE_DIR) +
                          "/tests/core/compressed_tensors_pack.py " + dir.path().string() + " " + mode;
  REQUIRE(std::system(cmd.c_str()) == 0);
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<llmk::Model> make_model(std::shared_ptr<const llmk::Checkpoint> checkpoint,
                                        llmk::PluginRegistry& plugins, const std::string& linear,
                                        const std::string& options) {
  llmk::EngineConfig cfg;
  cfg.plugins.linear = linear;
  cfg.plugins.linear_options = options;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 256;
  cfg.kv_cache.dtype = llmk::DType::f32;
  cfg.scheduler.max_num_batched_tokens = 64;
  return std::make_unique<llmk::Model>(checkpoint, plugins, cfg, llmk::resolve_runtime(cfg, *checkpoint));
}

std::vector<float> all_logits(llmk::Model& model, const std::vector<int32_t>& ids) {
  const llmk::StepBatch b = llmk::test::whole_prompt_step(ids, 256);
  std::vector<float> logits(ids.size() * static_cast<size_t>(model.config().vocab_size));
  model.forward(b, logits.data());
  return logits;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
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
      // 4-bit projections stay integer groups (linear.int4's stored form), the rest F32.
      const bool groups = std::string(mode).rfind("int4", 0) == 0 && name.find("_proj.weight") != std::string::npos;
      REQUIRE(t.dtype == (groups ? llmk::DType::int4_groups : llmk::DType::f32));
      REQUIRE(t.shape == e.shape);
      std::vector<float> got(static_cast<size_t>(t.numel()));
      llmk::convert_to_f32(t.dtype, t.data, got.data(), got.size());
      CHECK(std::memcmp(got.data(), expected.data(e), got.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("A compressed-tensors int4 model computes on its integers and agrees with its dequantized float twin",
          "[checkpoint][compressed_tensors]") {
  if (!llmk::test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  llmk::PluginRegistry plugins;
  for (const char* mode : {"int4_group", "int4_group_asym"}) {
    INFO(mode);
    TempDir dir, twin_dir;
    pack(dir, mode);
    // The twin: the same config without quantization_config, every tensor as the packer dequantized it.
    nlohmann::json config = nlohmann::json::parse(read_file(dir.path() / "config.json"));
    config.erase("quantization_config");
    std::ofstream(twin_dir.path() / "config.json") << config.dump();
    std::filesystem::copy_file(dir.path() / "expected.safetensors", twin_dir.path() / "model.safetensors");
    const std::shared_ptr<const llmk::Checkpoint> quant = llmk::load_checkpoint(dir.path());
    const std::shared_ptr<const llmk::Checkpoint> twin = llmk::load_checkpoint(twin_dir.path());
    const std::vector<int32_t> prompt = {1, 17, 42, 5, 63, 8, 29, 71, 3, 50};
    const std::vector<float> want = all_logits(*make_model(twin, plugins, "linear.dense", "{}"), prompt);
    // linear.int4 with f32 rows computes exactly on the integers (only the order of float sums differs).
    const std::vector<float> exact =
        all_logits(*make_model(quant, plugins, "linear.int4", R"({"activations":"f32","float_layers":["lm_head"]})"),
                   prompt);
    CHECK(rel_l2(exact, want) < 2e-5);
    // On the default plugins the integers fall to linear.int4 with int8 rows: close, not exact.
    const double rounded = rel_l2(all_logits(*make_model(quant, plugins, "linear.dense", "{}"), prompt), want);
    CHECK(rounded > 0.0);
    CHECK(rounded < 2e-2);
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
                       Case{"unknown_format", llmk::ErrorCode::unsupported, "quantization_config.format", "marlin-24"},
                       Case{"static_activations", llmk::ErrorCode::unsupported,
                            "quantization_config.config_groups input_activations", "dynamic false"}}) {
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
