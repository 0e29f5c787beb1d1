// Medusa heads (speculative.method medusa) through the Engine on
// stories260K. The heads are made at test time the cheap Medusa-1 way: the
// model's own final-norm hidden states over text it sampled, and a least
// squares fit (tests/support/medusa_heads.py) of head i's output map onto
// the token i + 2 positions ahead, its residual block zero (the identity),
// saved in Medusa's format. Such heads predict: greedy decoding of the
// golden prompts (held out: the heads were fitted on sampled stories)
// accepts well above chance. Random heads are rarely accepted. Either way
// every greedy request decodes exactly as with speculation off, alone and
// in mixed continuous batches, under kv.paged, kv.contiguous and kv.vm,
// with trees and chains.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/model.hpp"
#include "core/plugin_loader.hpp"
#include "core/safetensors_writer.hpp"
#include "engine_fixture.hpp"
#include "support/command.hpp"
#include "support/prompt_step.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

std::string script() { return std::string(LLMK_SOURCE_DIR) + "/tests/support/medusa_heads.py"; }

EngineConfig medusa_config(EngineConfig cfg, const fs::path& heads, uint32_t tree_nodes) {
  cfg.speculative.method = "medusa";
  cfg.speculative.medusa_heads = heads.string();
  cfg.speculative.num_tokens = 2;
  cfg.speculative.medusa_top_k = 3;
  cfg.speculative.tree_nodes = tree_nodes;  // 2: a chain's worth (a chain where trees are off)
  return cfg;
}

// Two heads fitted on stories260K's hidden states over `num_stories`
// sampled stories, written into dir; the fit's training top-1 accuracies.
std::vector<double> fit_heads(const fs::path& dir, int num_stories) {
  std::vector<Request> stories;
  for (int i = 0; i < num_stories; ++i) {
    Request r;
    r.id = "story-" + std::to_string(i);
    r.prompt_token_ids = {1};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 1000 + i;
    r.sampling.max_tokens = 200;
    stories.push_back(std::move(r));
  }
  std::map<std::string, RequestResult> text;
  {
    Engine engine(stories_config());
    text = run_all(engine, stories);
  }
  // Each story's hidden rows, one prefill of the whole sequence.
  EngineConfig cfg = stories_config();
  cfg.kv_cache.capacity_tokens = 1024;
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(cfg.model.path);
  PluginRegistry plugins{{LLMK_PLUGIN_BUILD_DIR}};
  Model model(checkpoint, plugins, cfg, resolve_runtime(cfg, *checkpoint));
  const int32_t h = model.config().hidden_size;
  nlohmann::json sequences = nlohmann::json::array();
  std::ofstream hidden(dir / "hidden.bin", std::ios::binary);
  std::vector<float> rows;
  for (const Request& r : stories) {
    std::vector<int32_t> ids = r.prompt_token_ids;
    const auto& out = text.at(r.id).sample().token_ids;
    ids.insert(ids.end(), out.begin(), out.end());
    rows.resize(ids.size() * static_cast<size_t>(h));
    model.forward_hidden(whole_prompt_step(ids, 1024), rows.data());
    hidden.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
    sequences.push_back(ids);
  }
  hidden.close();
  std::ofstream(dir / "sequences.json") << nlohmann::json{{"sequences", sequences}}.dump();
  const CommandResult fit = run_command(venv_python() + " " + script() + " fit " + dir.string() + " 2 " +
                                        std::to_string(h) + " " + std::to_string(model.config().vocab_size) + " " +
                                        (dir / "hidden.bin").string() + " < " + (dir / "sequences.json").string());
  REQUIRE(fit.status == 0);
  return nlohmann::json::parse(fit.out)["top1"].get<std::vector<double>>();
}

double mean_acceptance_length(const EngineStats& s) {
  return 1.0 + static_cast<double>(s.num_spec_accepted_tokens) / static_cast<double>(std::max<uint64_t>(1, s.num_spec_drafts));
}

}  // namespace

TEST_CASE("Medusa heads fitted on stories260K's own hidden states are accepted well above chance, and greedy "
          "output equals plain decoding's under kv.paged, kv.contiguous and kv.vm",
          "[engine][speculative][medusa]") {
  if (!have_venv_python()) LLMK_SKIP("no .venv (scripts/setup.sh makes it): the heads are fitted with NumPy");
  TempDir dir;
  const std::vector<double> top1 = fit_heads(dir.path(), 24);
  INFO("training top-1 accuracy: head 0 " << top1[0] << ", head 1 " << top1[1]);
  const auto golden = load_golden();
  EngineConfig base = stories_config();
  base.kv_cache.block_size = 8;
  for (const char* allocator : {"kv.paged", "kv.contiguous", "kv.vm"}) {
    for (uint32_t nodes : {2u, 8u}) {
      INFO(allocator << ", tree_nodes " << nodes);
      EngineConfig cfg = medusa_config(base, dir.path(), nodes);
      cfg.plugins.kv_allocator = allocator;
      Engine engine(cfg);
      for (size_t i = 0; i < golden.size(); ++i) {
        INFO("golden case " << i);
        const auto r = run_all(engine, {golden_request(golden[i], "alone")});
        CHECK(r.at("alone").sample().token_ids == golden[i].greedy_ids);
      }
      const EngineStats stats = engine.stats();
      INFO("drafts " << stats.num_spec_drafts << ", draft tokens " << stats.num_spec_draft_tokens << ", accepted "
                     << stats.num_spec_accepted_tokens);
      CHECK(stats.num_spec_drafts > 0);
      // A chain of two is right by chance with probability ~ 2 / 512 a step.
      CHECK(mean_acceptance_length(stats) > 1.2);
      if (nodes == 8) CHECK(stats.num_spec_draft_tokens > 2 * stats.num_spec_drafts);  // trees, not chains
      CHECK(stats.kv.used_slots == 0);
    }
  }
}

TEST_CASE("with Medusa heads, fitted or random, every request of a mixed continuous batch decodes as with "
          "speculation off",
          "[engine][speculative][medusa]") {
  if (!have_venv_python()) LLMK_SKIP("no .venv (scripts/setup.sh makes it): the heads are written with NumPy");
  TempDir fitted, random;
  fit_heads(fitted.path(), 12);
  std::ofstream(random.path() / "x.json") << nlohmann::json{{"x", {std::vector<float>(64, 0.0f)}}}.dump();
  REQUIRE(run_command(venv_python() + " " + script() + " random " + random.path().string() + " 3 1 64 512 5 bf16 < " +
                      (random.path() / "x.json").string() + " > /dev/null")
              .status == 0);
  const auto golden = load_golden();
  std::mt19937 rng(23);
  const std::vector<Request> requests = golden_and_fillers(golden, 10, rng);
  EngineConfig base = stories_config();
  base.kv_cache.capacity_tokens = 4096;
  base.kv_cache.block_size = 8;
  base.scheduler.max_num_batched_tokens = 48;  // chunked prefill beside the verification rows
  std::map<std::string, RequestResult> plain;
  {
    Engine engine(base);
    plain = run_all(engine, requests);
  }
  for (const char* allocator : {"kv.paged", "kv.vm"})
    for (const TempDir* heads : {&fitted, &random}) {
      INFO(allocator << (heads == &fitted ? ", fitted heads" : ", random heads"));
      EngineConfig cfg = medusa_config(base, heads->path(), 8);
      cfg.plugins.kv_allocator = allocator;
      Engine engine(cfg);
      const auto spec = run_all(engine, requests);
      REQUIRE(spec.size() == plain.size());
      for (const Request& r : requests) {
        INFO("request " << r.id);
        const RequestResult& b = spec.at(r.id);
        CHECK(b.violations.empty());
        CHECK(b.num_done_events == 1);
        if (r.sampling.temperature > 0) continue;  // other draws with speculation on, the same distribution
        CHECK(b.sample().token_ids == plain.at(r.id).sample().token_ids);
      }
      for (size_t i = 0; i < golden.size(); ++i)
        CHECK(spec.at("golden-" + std::to_string(i)).sample().token_ids == golden[i].greedy_ids);
      const EngineStats stats = engine.stats();
      CHECK(stats.num_spec_drafts > 0);
      if (heads == &fitted) CHECK(stats.num_spec_accepted_tokens > 0);
      CHECK(stats.kv.used_slots == 0);
    }
}

TEST_CASE("with Medusa heads, every CPU linear plugin decodes its own greedy ids with speculation on and off",
          "[engine][speculative][medusa]") {
  if (!have_venv_python()) LLMK_SKIP("no .venv (scripts/setup.sh makes it): the heads are fitted with NumPy");
  TempDir dir;
  fit_heads(dir.path(), 12);
  const auto golden = load_golden();
  std::vector<Request> requests;
  for (size_t i = 0; i < golden.size(); ++i) requests.push_back(golden_request(golden[i], "g" + std::to_string(i)));
  // Each plugin's own greedy text is the reference (quantized plugins
  // differ from the golden float64 text): the verification rows and the
  // hidden rows the heads read come from the same many-row product.
  for (const char* linear : {"linear.int8", "linear.int4", "linear.lut4", "linear.uint8_zp"}) {
    INFO(linear);
    EngineConfig base = stories_config();
    base.kv_cache.block_size = 8;
    base.plugins.linear = linear;
    std::map<std::string, RequestResult> plain;
    {
      Engine engine(base);
      plain = run_all(engine, requests);
    }
    Engine engine(medusa_config(base, dir.path(), 8));
    const auto spec = run_all(engine, requests);
    for (const Request& r : requests) {
      INFO("request " << r.id);
      CHECK(spec.at(r.id).sample().token_ids == plain.at(r.id).sample().token_ids);
    }
    const EngineStats stats = engine.stats();
    CHECK(stats.num_spec_drafts > 0);
    CHECK(stats.num_spec_accepted_tokens > 0);
    CHECK(stats.kv.used_slots == 0);
  }
}

TEST_CASE("Medusa heads that are missing or do not fit the target are refused at start, naming "
          "speculative.medusa_heads",
          "[engine][speculative][medusa][config]") {
  EngineConfig missing = medusa_config(stories_config(), "/nonexistent/medusa", 8);
  CHECK_THROWS_WITH(Engine(missing), Catch::Contains("speculative.medusa_heads") &&
                                         Catch::Contains("/nonexistent/medusa"));
  TempDir dir;
  std::vector<TensorSpec> tensors;
  auto zeros = [](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return TensorSpec{std::move(name), "F32", std::move(shape), std::string(static_cast<size_t>(n) * 4, '\0')};
  };
  tensors.push_back(zeros("0.0.linear.weight", {64, 64}));
  tensors.push_back(zeros("0.0.linear.bias", {64}));
  tensors.push_back(zeros("0.1.weight", {1000, 64}));  // another vocabulary
  write_safetensors(dir.path() / "medusa_lm_head.safetensors", tensors);
  CHECK_THROWS_WITH(Engine(medusa_config(stories_config(), dir.path(), 8)),
                    Catch::Contains("speculative.medusa_heads") && Catch::Contains("'0.1.weight' has shape [1000, 64]") &&
                        Catch::Contains("vocab_size 512"));
}
