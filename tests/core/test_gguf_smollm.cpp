// The real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/setup.sh downloads it to
// ${LLMK_MODEL_CACHE:-~/.cache/llmk}/models) against a float64 reference
// that owes nothing to llmk or llama.cpp's runtime:
// tests/gguf_smollm_reference.py dequantizes the file with PyPI gguf and
// runs tests/arch_reference.py's forward. Skipped when the file is absent.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/model_cache.hpp"
#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/generate.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_test_support.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors_writer.hpp"
#include "core/tokenizer.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

fs::path smollm_file() { return test::smollm2_file(); }

}  // namespace

TEST_CASE("SmolLM2 Q4_1 GGUF gives the float64 reference's logits and greedy tokens", "[gguf][golden][smollm]") {
  const fs::path file = smollm_file();
  if (!fs::is_regular_file(file)) LLMK_SKIP("SmolLM2-135M-Instruct.Q4_1.gguf is not in the model cache");
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  // "The capital of France is", one vocabulary token per word.
  const std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/gguf_smollm_reference.py " +
                          file.string() + " " + dir.path().string() + " The Ġcapital Ġof ĠFrance Ġis >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream json_in(dir.path() / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(json_in);
  const std::vector<int32_t> ids = ref.at("input_ids"), want_greedy = ref.at("greedy_ids");

  std::shared_ptr<const Checkpoint> checkpoint = load_gguf_checkpoint(file);
  const ModelConfig& mc = checkpoint->config();
  CHECK(mc.num_layers == 30);
  CHECK(mc.tie_word_embeddings);
  CHECK(checkpoint->tensor("model.layers.0.self_attn.q_proj.weight").dtype == ggml_dtype(3));  // Q4_1, as stored
  const int32_t vocab = mc.vocab_size;
  std::vector<double> want(ids.size() * static_cast<size_t>(vocab));
  std::ifstream logits_in(dir.path() / "logits.f64", std::ios::binary);
  REQUIRE(logits_in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 8)));

  EngineConfig cfg;
  cfg.executor.num_threads = 2;
  cfg.kv_cache.capacity_tokens = 256;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.kv_cache.dtype = DType::f32;  // compared with float64: auto would give a GGUF an f16 cache
  cfg.plugins.linear_blocks = "none";  // the blocks dequantized to F32, computed in F32 (linear.gguf rounds activations)
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  Model model(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
  const StepBatch b = test::whole_prompt_step(ids, 256);
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<float> got(want.size());
  model.forward(b, got.data());
  for (int32_t p = 0; p < n; ++p) {
    INFO("position " << p);
    const float* g = got.data() + static_cast<size_t>(p) * vocab;
    const double* w = want.data() + static_cast<size_t>(p) * vocab;
    double num = 0, den = 0;
    for (int32_t v = 0; v < vocab; ++v) {
      num += (g[v] - w[v]) * (g[v] - w[v]);
      den += w[v] * w[v];
    }
    // F32 weights and activations against float64 through 30 layers:
    // measured at most 1.4e-6 over the five positions.
    CHECK(std::sqrt(num / den) < 1e-5);
    CHECK(std::max_element(g, g + vocab) - g == std::max_element(w, w + vocab) - w);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = static_cast<int32_t>(want_greedy.size());
  const GenerateResult r = generate(model, ids, greedy, {}, [](int32_t) { return true; });
  CHECK(r.token_ids == want_greedy);
}
