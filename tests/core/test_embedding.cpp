// Embeddings of stories260K (Model::forward_hidden + EmbeddingPooler) against
// a float64 NumPy forward in Hugging Face Llama semantics
// (tests/core/embedding_reference.py): mean and last pooling, raw, unit
// length and truncated; whole and chunked prefill, alone and in one batch of
// several inputs; the base64 encoding as the openai SDK decodes it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/embedding.hpp"
#include "core/error.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "support/command.hpp"
#include "support/golden.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

namespace {

using namespace llmk;
namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;  // relative L2, f32 forward against float64

struct Fixture {
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  EngineConfig cfg;
  std::unique_ptr<Model> model;
  Fixture() {
    cfg.executor.num_threads = 2;
    cfg.kv_cache.capacity_tokens = 2048;
    cfg.kv_cache.dtype = DType::f32;
    cfg.scheduler.max_num_batched_tokens = 512;
    model = std::make_unique<Model>(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
  }
  int32_t hidden() const { return model->config().hidden_size; }
};

std::vector<std::vector<int32_t>> golden_inputs() {
  std::vector<std::vector<int32_t>> out;
  for (const test::GoldenCase& c : test::golden_cases()) out.push_back(c.input_ids);
  out.push_back({1});  // a lone BOS: mean and last pooling agree
  return out;
}

// The reference script's answer for `inputs`.
nlohmann::json reference(const std::vector<std::vector<int32_t>>& inputs) {
  const fs::path in = fs::temp_directory_path() / ("llmk_embedding_ref_" + std::to_string(::getpid()) + ".json");
  std::ofstream(in) << nlohmann::json{{"inputs", inputs}}.dump();
  const test::CommandResult r = test::run_command(test::venv_python() + " " + std::string(LLMK_SOURCE_DIR) +
                                                  "/tests/core/embedding_reference.py embed " + test::stories_dir() +
                                                  " < " + in.string());
  fs::remove(in);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

// Pools one input prefilled in chunks of `chunk` tokens (slots [0, n)).
std::vector<float> embed_chunked(Model& model, const std::vector<int32_t>& ids, int32_t chunk, const EmbeddingParams& p) {
  const int32_t h = model.config().hidden_size, n = static_cast<int32_t>(ids.size());
  EmbeddingPooler pooler(h, p);
  for (int32_t begin = 0; begin < n; begin += chunk) {
    const int32_t end = std::min(n, begin + chunk);
    StepBatch b;
    for (int32_t t = begin; t < end; ++t) {
      b.token_ids.push_back(ids[t]);
      b.positions.push_back(t);
      b.slot_mapping.push_back(t);
      b.logits_rows.push_back(t - begin);
    }
    b.query_start = {0, end - begin};
    b.context_lens = {end};
    b.block_tables = {0};
    b.max_blocks_per_seq = 1;
    b.block_size = 1024;
    std::vector<float> rows(static_cast<size_t>(b.num_logits()) * h);
    model.forward_hidden(b, rows.data());
    pooler.add(rows.data(), b.num_logits());
  }
  return pooler.finish();
}

double rel_l2(const std::vector<float>& got, const nlohmann::json& want) {
  const std::vector<double> w = want;
  REQUIRE(got.size() == w.size());
  return test::rel_l2(got.data(), w);
}

}  // namespace

TEST_CASE("stories260K embeddings: mean and last pooling, raw, unit and truncated, match the float64 reference", "[embedding]") {
  if (!test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  Fixture f;
  const auto inputs = golden_inputs();
  const nlohmann::json ref = reference(inputs);
  const int32_t dims = ref.at("dims");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const nlohmann::json& want = ref.at("embeddings")[i];
    for (Pooling pooling : {Pooling::mean, Pooling::last}) {
      const std::string name = to_string(pooling);
      for (int32_t chunk : {512, 3}) {
        INFO("input " << i << ", " << name << " pooling, chunks of " << chunk);
        CHECK(rel_l2(embed_chunked(*f.model, inputs[i], chunk, {pooling, false, 0}), want.at(name)) < kTolerance);
        const std::vector<float> unit = embed_chunked(*f.model, inputs[i], chunk, {pooling, true, 0});
        CHECK(rel_l2(unit, want.at(name + "_unit")) < kTolerance);
        double norm = 0;
        for (float x : unit) norm += static_cast<double>(x) * x;
        CHECK(std::abs(norm - 1.0) < 1e-6);
        const std::vector<float> cut = embed_chunked(*f.model, inputs[i], chunk, {pooling, true, dims});
        CHECK(cut.size() == static_cast<size_t>(dims));
        CHECK(rel_l2(cut, want.at(name + "_unit_dims")) < kTolerance);
      }
    }
  }
}

TEST_CASE("stories260K embeddings: an input among others in one paged batch pools to the same vector as alone", "[embedding]") {
  Fixture f;
  const int32_t h = f.hidden();
  const auto inputs = golden_inputs();
  const int32_t block = 7, max_blocks = 16;
  // Every input prefilled at once, each in its own run of blocks, hidden rows for all positions.
  StepBatch b;
  b.block_size = block;
  b.max_blocks_per_seq = max_blocks;
  b.query_start = {0};
  for (size_t s = 0; s < inputs.size(); ++s) {
    const auto n = static_cast<int32_t>(inputs[s].size());
    REQUIRE(n <= block * max_blocks);
    const int32_t first_slot = static_cast<int32_t>(s) * block * max_blocks;
    for (int32_t t = 0; t < n; ++t) {
      b.logits_rows.push_back(b.num_tokens());
      b.token_ids.push_back(inputs[s][t]);
      b.positions.push_back(t);
      b.slot_mapping.push_back(first_slot + t);
    }
    for (int32_t k = 0; k < max_blocks; ++k) b.block_tables.push_back(first_slot + k * block);
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(n);
  }
  std::vector<float> rows(static_cast<size_t>(b.num_logits()) * h);
  f.model->forward_hidden(b, rows.data());
  for (Pooling pooling : {Pooling::mean, Pooling::last}) {
    for (size_t s = 0; s < inputs.size(); ++s) {
      INFO("input " << s << ", " << to_string(pooling) << " pooling");
      EmbeddingPooler pooler(h, {pooling, true, 0});
      pooler.add(rows.data() + static_cast<size_t>(b.query_start[s]) * h, b.query_start[s + 1] - b.query_start[s]);
      const std::vector<float> batched = pooler.finish();
      const std::vector<float> alone = embed_chunked(*f.model, inputs[s], 512, {pooling, true, 0});
      const std::vector<double> want(alone.begin(), alone.end());
      CHECK(test::rel_l2(batched.data(), want) < 1e-5);
    }
  }
}

TEST_CASE("base64 embeddings decode, as the openai SDK decodes them, to the same float32 values", "[embedding]") {
  if (!test::have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  const std::vector<std::vector<float>> vectors = {
      {1.0f}, {1.0f, -2.5f}, {0.1f, -0.0f, 3.4e38f, 1e-45f, -7.25f}, {0.5f, 0.25f, 0.125f, -1e-3f, 42.0f, 6.0f}};
  const fs::path in = fs::temp_directory_path() / ("llmk_embedding_b64_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(in);
    for (const auto& v : vectors) out << encode_base64_f32(v) << "\n";
  }
  const test::CommandResult r = test::run_command(test::venv_python() + " " + std::string(LLMK_SOURCE_DIR) +
                                                  "/tests/core/embedding_reference.py decode < " + in.string());
  fs::remove(in);
  REQUIRE(r.status == 0);
  const nlohmann::json decoded = nlohmann::json::parse(r.out);
  REQUIRE(decoded.size() == vectors.size());
  for (size_t i = 0; i < vectors.size(); ++i) {
    INFO("vector " << i);
    const std::vector<double> got = decoded[i];
    REQUIRE(got.size() == vectors[i].size());
    for (size_t k = 0; k < got.size(); ++k) CHECK(static_cast<float>(got[k]) == vectors[i][k]);
  }
}

TEST_CASE("embedding parameters out of range are refused naming the field", "[embedding]") {
  EmbeddingParams p;
  p.dimensions = 65;
  try {
    validate_embedding_params(p, 64);
    FAIL("dimensions above the hidden size was accepted");
  } catch (const FieldError& e) {
    CHECK(e.field() == "dimensions");
    CHECK(std::string(e.what()).find("64") != std::string::npos);
  }
  p.dimensions = -1;
  CHECK_THROWS_AS(validate_embedding_params(p, 64), FieldError);
  p.dimensions = 64;
  CHECK_NOTHROW(validate_embedding_params(p, 64));
  CHECK_THROWS_WITH(EmbeddingPooler(64, {}).finish(), Catch::Contains("no tokens"));
  CHECK(parse_pooling("mean") == Pooling::mean);
  CHECK(parse_pooling("last") == Pooling::last);
  CHECK_FALSE(parse_pooling("cls").has_value());
}
