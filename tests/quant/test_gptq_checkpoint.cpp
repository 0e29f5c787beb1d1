// GPTQ and AWQ checkpoints (core/gptq_checkpoint.hpp): folders written by
// tests/quant/fixtures/gptq_pack.py, which packs stories260K's projections
// as AutoGPTQ/GPTQModel and AutoAWQ lay them out and writes its own
// dequantization beside them. The loader must reproduce that dequantization
// bit for bit, the model must run on the integers (linear.int4,
// linear.uint8_zp) and agree with a float twin holding the dequantized
// weights, and broken files must be refused naming the tensor.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/generate.hpp"
#include "core/int_groups.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string stories_dir() { return std::string(LLMK_SHARED_DIR) + "/models/stories260K"; }

// Packs stories260K into dir with the packer's arguments; false when the packer fails.
bool pack(const fs::path& dir, const std::string& args) {
  const std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/quant/fixtures/gptq_pack.py " +
                          stories_dir() + " " + dir.string() + " " + args + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string load_error(const fs::path& dir) {
  try {
    load_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

std::unique_ptr<Model> make_model(std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins,
                                  const std::string& linear = "linear.dense", const std::string& options = "{}") {
  EngineConfig cfg;
  cfg.plugins.linear = linear;
  cfg.plugins.linear_options = options;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 1024;
  cfg.kv_cache.dtype = DType::f32;
  cfg.scheduler.max_num_batched_tokens = 256;
  return std::make_unique<Model>(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
}

std::vector<float> all_logits(Model& model, const std::vector<int32_t>& ids) {
  const StepBatch b = whole_prompt_step(ids, 1024);
  std::vector<float> logits(ids.size() * static_cast<size_t>(model.config().vocab_size));
  model.forward(b, logits.data());
  return logits;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

// Every weight the packer quantized loads as integer groups whose
// dequantization equals the packer's, bit for bit; returns how many.
size_t check_exact(const fs::path& dir, DType want) {
  const auto checkpoint = load_checkpoint(dir);
  const SafetensorsFile reference(dir / "reference.safetensors");
  size_t checked = 0;
  for (const auto& [name, e] : reference.entries()) {
    INFO(name);
    const TensorView& t = checkpoint->tensor(name);
    REQUIRE(t.dtype == want);
    REQUIRE(t.shape == e.shape);
    std::vector<float> got(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data, got.data(), got.size());
    CHECK(std::memcmp(got.data(), reference.data(e), got.size() * 4) == 0);
    ++checked;
  }
  return checked;
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 430, 271, 395, 285, 275, 300, 268, 400};

}  // namespace

TEST_CASE("GPTQ and AWQ folders load to the packer's own dequantized weights, bit for bit", "[gptq]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv (numpy) is absent");
  for (const auto& [args, dtype] : std::vector<std::pair<std::string, DType>>{
           {"--method gptq --bits 4 --group 32", DType::int4_groups},
           {"--method gptq --bits 4 --group 32 --act-order", DType::int4_groups},
           {"--method gptq --bits 4 --group 64 --sym --v2 --style quantize_config", DType::int4_groups},
           {"--method gptq --bits 4 --group 16 --act-order --v2", DType::int4_groups},
           {"--method gptq --bits 8 --group -1 --layers all", DType::int8_groups},
           {"--method gptq --bits 8 --group 32 --act-order --v2", DType::int8_groups},
           {"--method awq --group 32", DType::int4_groups},
           {"--method awq --group 64", DType::int4_groups}}) {
    INFO(args);
    TempDir dir;
    REQUIRE(pack(dir.path(), args));
    // q/k/v/o of 5 layers (and the MLP's 3 with --layers all).
    CHECK(check_exact(dir.path(), dtype) == (args.find("--layers all") != std::string::npos ? 35u : 20u));
  }
}

TEST_CASE("a GPTQ or AWQ model computes on its integers and agrees with its dequantized float twin", "[gptq]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv (numpy) is absent");
  PluginRegistry plugins;
  // linear.int4 with f32 activations computes exactly on the integers; the MLP and the head stay float.
  const std::string int4_f32 = R"({"activations":"f32","float_layers":["mlp","lm_head"]})";
  for (const std::string args : {"--method gptq --bits 4 --group 32 --act-order", "--method awq --group 32",
                                 "--method gptq --bits 4 --group 64 --sym --v2"}) {
    INFO(args);
    TempDir dir;
    REQUIRE(pack(dir.path(), args));
    const std::shared_ptr<const Checkpoint> quant = load_checkpoint(dir.path());
    const std::shared_ptr<const Checkpoint> twin = load_checkpoint(dir.path() / "twin");
    auto mq = make_model(quant, plugins, "linear.int4", int4_f32);
    auto mf = make_model(twin, plugins);
    const std::vector<float> a = all_logits(*mq, kPrompt), b = all_logits(*mf, kPrompt);
    // Only the order of float sums differs (the kernel applies scale and zero per group).
    CHECK(rel_l2(a, b) < 2e-5);
    // On the default plugins (linear.dense), the integers fall to linear.int4 (int8 activations): close, not exact.
    auto md = make_model(quant, plugins);
    CHECK(rel_l2(all_logits(*md, kPrompt), b) < 2e-2);
  }
}

TEST_CASE("stories260K packed by GPTQ at 8 bits keeps the float model's greedy text", "[gptq][golden]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv (numpy) is absent");
  std::ifstream in(std::string(LLMK_SHARED_DIR) + "/golden/stories260K.json");
  REQUIRE(in);
  const auto golden = nlohmann::json::parse(in).at("cases");
  TempDir dir;
  REQUIRE(pack(dir.path(), "--method gptq --bits 8 --group -1 --layers all --act-order"));
  PluginRegistry plugins;
  const std::shared_ptr<const Checkpoint> quant = load_checkpoint(dir.path());
  // Every projection on linear.uint8_zp (8 bits, one group per channel, input order gathered).
  auto model = make_model(quant, plugins);
  const auto twin = make_model(load_checkpoint(dir.path() / "twin"), plugins);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 24;
  for (const auto& c : golden) {
    const std::vector<int32_t> ids = c.at("input_ids");
    const std::vector<int32_t> want = c.at("greedy_ids");
    const GenerateResult r = generate(*model, ids, greedy, {2}, [](int32_t) { return true; });
    // 8-bit rounding moves the logits a little: the first 16 greedy tokens are the float model's
    // (measured: every case agrees for at least 23; one parts at its 24th).
    const size_t n = std::min<size_t>(16, want.size());
    REQUIRE(r.token_ids.size() >= n);
    CHECK(std::vector<int32_t>(r.token_ids.begin(), r.token_ids.begin() + n) ==
          std::vector<int32_t>(want.begin(), want.begin() + n));
    CHECK(rel_l2(all_logits(*model, ids), all_logits(*twin, ids)) < 2e-5);
  }
}

TEST_CASE("broken GPTQ and AWQ files are refused naming the tensor", "[gptq][errors]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv (numpy) is absent");
  const std::string q = "model.layers.0.self_attn.q_proj";
  for (const auto& [args, expect] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"--method gptq --act-order --g-idx-value 9", {"'" + q + ".g_idx'", "g_idx[0] = 9 is outside 0..1"}},
           {"--method gptq --act-order --g-idx-value -1", {"'" + q + ".g_idx'", "is outside 0..1"}},
           {"--method gptq --group 32 --claim-group 48", {"self_attn.k_proj.qweight'", "group_size 48 does not divide in_features 64"}},
           {"--method gptq --drop " + q + ".scales", {"'" + q + ".scales'", "missing"}},
           {"--method awq --drop " + q + ".qzeros", {"'" + q + ".qzeros'", "missing"}},
           {"--method gptq --group 32 --claim-group 64", {"self_attn.k_proj.qzeros'", "shape [2, 4], expected [1, 4]"}},
           {"--method awq --group 32 --claim-group 16", {"self_attn.k_proj.qzeros'", "shape [2, 4], expected [4, 4]"}}}) {
    INFO(args);
    TempDir dir;
    REQUIRE(pack(dir.path(), args));
    const std::string err = load_error(dir.path());
    for (const std::string& e : expect) CHECK_THAT(err, Contains(e));
  }
  // A g_idx whose groups are uneven (column 0 moved to the other of the two groups) is no act-order
  // permutation: of g_idx[0] = 0 and 1, one moves column 0 and is refused, the other is the packed value.
  int refused = 0;
  for (const char* v : {"0", "1"}) {
    TempDir dir;
    REQUIRE(pack(dir.path(), std::string("--method gptq --act-order --g-idx-value ") + v));
    const std::string err = load_error(dir.path());
    if (err == "(loaded)") continue;
    CHECK_THAT(err, Contains("'" + q + ".g_idx'") && Contains("does not hold 32 input columns"));
    ++refused;
  }
  CHECK(refused == 1);
}
