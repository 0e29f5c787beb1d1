// `llmk info` end to end: the built binary on the shared model, on dummy
// presets, and on broken model directories (clear message, exit status 1,
// no crash).
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <cstdlib>

#include "core/safetensors_writer.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kStories = fs::path(LLMK_SHARED_DIR) / "models" / "stories260K";

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal (a crash)
  std::string out;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

RunResult run_llmk(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = quote((fs::path(LLMK_BINARY_DIR) / "bin" / "llmk").string());
  for (const auto& a : args) cmd.append(" ").append(quote(a));
  cmd.append(" >").append(quote((tmp.path() / "out").string()));
  cmd.append(" 2>").append(quote((tmp.path() / "err").string()));
  const int status = std::system(cmd.c_str());
  RunResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = read_file(tmp.path() / "out");
  r.err = read_file(tmp.path() / "err");
  return r;
}

nlohmann::json info_json(std::vector<std::string> args) {
  args.insert(args.begin(), "info");
  args.push_back("--json");
  const RunResult r = run_llmk(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("llmk info describes stories260K", "[cli][info]") {
  const RunResult r = run_llmk({"info", "--model", kStories.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("LlamaForCausalLM") && Contains("260032") && Contains("num_key_value_heads"));
}

TEST_CASE("llmk info --json reports sizes that follow from the config", "[cli][info]") {
  const auto d = info_json({"--model", kStories.string()});
  CHECK(d["load_format"] == "safetensors");
  CHECK(d["architecture"] == "LlamaForCausalLM");
  CHECK(d["config"]["hidden_size"] == 64);
  CHECK(d["config"]["num_key_value_heads"] == 4);
  CHECK(d["config"]["eos_token_id"] == nlohmann::json::array({2}));
  CHECK(d["num_parameters"] == 260032);
  CHECK(d["num_parameters_in_tensors"] == 260032);
  CHECK(d["weight_bytes"] == fs::file_size(kStories / "model.safetensors") - 8 - 4856);  // data after the header
  CHECK(d["weight_dtype"] == "f32");
  CHECK(d["kv_bytes_per_token"]["f32"] == 2 * 5 * 4 * 8 * 4);
  CHECK(d["kv_bytes_per_token"]["i8"] == 2 * 5 * 4 * 8 + 2 * 5 * 4 * 4);
  CHECK(d["max_seq_len"] == 512);
  CHECK(d["kv_bytes_per_sequence"]["f32"] == 1280 * 512);
  CHECK(d["tokenizer"] == (kStories / "tokenizer.model").string());
}

TEST_CASE("llmk info follows --set for the KV figures", "[cli][info]") {
  const auto d = info_json({"--model", kStories.string(), "--set", "kv_cache.group_size=4", "--set",
                            "kv_cache.max_seq_len=100"});
  CHECK(d["kv_group_size"] == 4);
  CHECK(d["kv_bytes_per_token"]["i8"] == 2 * 5 * 4 * 8 + 2 * 5 * 4 * 2 * 4);
  CHECK(d["kv_bytes_per_sequence"]["f32"] == 1280 * 100);
}

TEST_CASE("llmk info --linear reports the weight bytes each linear plugin stores", "[cli][info]") {
  const auto d = info_json({"--model", kStories.string(), "--linear", "linear.dense", "--linear", "linear.int4",
                            "--set", "plugins.linear=linear.int4", "--set",
                            R"(plugins.linear_options={"float_layers":["lm_head"]})"});
  REQUIRE(d["linear"].size() == 2);
  const auto& dense = d["linear"][0];
  const auto& int4 = d["linear"][1];
  CHECK(dense["plugin"] == "linear.dense");
  CHECK(dense["options"] == nlohmann::json::object());  // not the configured plugin: its defaults
  CHECK(int4["plugin"] == "linear.int4");
  CHECK(int4["options"]["float_layers"] == nlohmann::json::array({"lm_head"}));
  // Dense f32: the embedding, norms and every linear (lm_head a packed copy of the tied embedding).
  CHECK(dense["weight_bytes"] == 1222400);
  // int4 with lm_head in f32: [5 x (qkv 128x64 + o 64x64 + gate_up 344x64 + down 64x172)] nibbles
  // (channels padded to 16, inputs to 8) plus an f32 scale and a u8 zero point per group (one group
  // per row of 64, two per down_proj row of 172), plus the embedding, norms and the f32 lm_head.
  const int64_t packed = 5 * (128 * 64 / 2 + 64 * 64 / 2 + 352 * 64 / 2 + 64 * 176 / 2);
  const int64_t groups = 5 * (128 + 64 + 352 + 2 * 64) * 5;
  const int64_t rest = 512 * 64 * 4 + (64 + 5 * 128) * 4 + 512 * 64 * 4;
  CHECK(int4["weight_bytes"] == packed + groups + rest);
  const auto all = info_json({"--model", kStories.string(), "--linear", "all"});
  CHECK(all["linear"].size() >= 3);
  // linear.gguf computes on a GGUF file's blocks only: on float weights it is
  // listed with the reason, not as a failure of the command.
  for (const auto& m : all["linear"])
    if (m["plugin"] == "linear.gguf") CHECK_THAT(m["refused"].get<std::string>(), Catch::Contains("not a ggml block type"));
}

TEST_CASE("llmk info describes dummy presets without a model directory", "[cli][info]") {
  const auto d = info_json({"--load-format", "dummy", "--preset", "tinyllama-1.1b"});
  CHECK(d["load_format"] == "dummy");
  CHECK(d["num_parameters"] == 1100048384);
  CHECK(d["weight_bytes"] == 2 * 1100048384LL);
  CHECK(d["weight_dtype"] == "f16");
  CHECK(d["kv_bytes_per_token"]["f32"] == 45056);
  const auto auto_format = info_json({"--preset", "llama3-8b"});
  CHECK(auto_format["load_format"] == "dummy");
  CHECK(auto_format["num_parameters"] == 8030261248LL);
  CHECK(auto_format["config"]["rope_theta"] == 500000.0);
}

TEST_CASE("llmk info at tensor 2 x pipeline 2 gives each rank of stories260K its share", "[cli][info][parallel]") {
  const auto whole = info_json({"--model", kStories.string()});
  const auto d = info_json({"--model", kStories.string(), "--set", "parallel.tensor=2", "--set", "parallel.pipeline=2",
                            "--set", "kv_cache.capacity_tokens=1000"});
  REQUIRE(d.contains("parallel"));
  const auto& p = d["parallel"];
  CHECK(p["kv_slots"] == 1000);
  REQUIRE(p["ranks"].size() == 4);
  using nlohmann::json;
  int64_t weight_bytes = 0, kv_per_token = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const auto& r = p["ranks"][rank];
    INFO("rank " << rank);
    const int stage = rank / 2, t = rank % 2;
    CHECK(r["stage"] == stage);
    CHECK(r["tensor_rank"] == t);
    CHECK(r["layers"] == (stage == 0 ? json{0, 3} : json{3, 5}));  // 5 layers: the first stage takes the odd one
    CHECK(r["q_heads"] == json{4 * t, 4 * t + 4});                   // 8 query heads
    CHECK(r["kv_heads"] == json{2 * t, 2 * t + 2});                  // 4 KV heads
    CHECK(r["mlp_columns"] == json{86 * t, 86 * t + 86});            // MLP width 172
    CHECK(r["vocab_rows"] == json{256 * t, 256 * t + 256});          // 512 tokens
    // f32 K and V of this stage's layers, 2 KV heads of 8 values each.
    const int layers = stage == 0 ? 3 : 2;
    CHECK(r["kv_bytes_per_token"] == 2 * layers * 2 * 8 * 4);
    CHECK(r["kv_bytes"] == r["kv_bytes_per_token"].get<int64_t>() * 1000);
    weight_bytes += r["weight_bytes"].get<int64_t>();
    kv_per_token += r["kv_bytes_per_token"].get<int64_t>();
  }
  // Together the ranks hold the model once, plus what is whole on both
  // tensor ranks of a stage (each layer's two norms, the final norm: 2 x 64
  // x 5 + 64 values) and the tied embedding the last stage keeps again as
  // its lm_head (512 x 64); f32.
  CHECK(weight_bytes == whole["weight_bytes"].get<int64_t>() + (2 * 64 * 5 + 64 + 512 * 64) * 4);
  CHECK(kv_per_token == whole["kv_bytes_per_token"]["f32"].get<int64_t>());
  CHECK_FALSE(whole.contains("parallel"));

  const RunResult text = run_llmk({"info", "--model", kStories.string(), "--set", "parallel.tensor=2"});
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Contains("tensor 2 x pipeline 1") && Contains("rank 1") && Contains("vocabulary rows [256, 512)"));
}

TEST_CASE("llmk info past the KV heads' count gives each rank one KV head, repeated", "[cli][info][parallel]") {
  // TinyLlama: 32 query heads, 4 KV heads, f16; at tensor 8 each KV head sits on 2 ranks.
  const auto d = info_json({"--load-format", "dummy", "--preset", "tinyllama-1.1b", "--set", "parallel.tensor=8"});
  REQUIRE(d["parallel"]["ranks"].size() == 8);
  CHECK(d["parallel"]["kv_dtype"] == "f16");
  int64_t kv = 0, weights = 0;
  for (const auto& r : d["parallel"]["ranks"]) {
    const int t = r["tensor_rank"];
    CHECK(r["kv_heads"] == nlohmann::json{t / 2, t / 2 + 1});
    CHECK(r["kv_bytes_per_token"] == 2 * 22 * 64 * 2);
    kv += r["kv_bytes_per_token"].get<int64_t>();
    weights += r["weight_bytes"].get<int64_t>();
  }
  CHECK(kv == 2 * d["kv_bytes_per_token"]["f16"].get<int64_t>());
  // The KV projections' rows are repeated like their heads: k and v of 4 x 64
  // rows become 8 x 64; the norms (2 x 22 + 1 of 2048) are whole on all 8.
  const int64_t extra_kv_rows = 22 * 2 * (8 * 64 - 4 * 64) * 2048;
  const int64_t extra_norms = 7 * (2 * 22 + 1) * 2048;
  CHECK(weights == d["weight_bytes"].get<int64_t>() + 2 * (extra_kv_rows + extra_norms));
}

TEST_CASE("llmk info refuses a parallel degree the engine refuses, with the engine's message", "[cli][info][parallel]") {
  RunResult r = run_llmk({"info", "--model", kStories.string(), "--set", "parallel.tensor=3"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("parallel.tensor 3 does not divide the 8 attention heads"));
  r = run_llmk({"info", "--model", kStories.string(), "--set", "parallel.pipeline=6"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("parallel.pipeline 6 exceeds the model's 5 layers"));
}

TEST_CASE("llmk estimate --tp --pp reports each device's weights and KV", "[cli][estimate][parallel]") {
  const RunResult r = run_llmk({"estimate", "--preset", "llama3-8b", "--device", "h100-sxm", "--tp", "2", "--pp", "2",
                                "--kv-dtype", "f16", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto d = nlohmann::json::parse(r.out);
  CHECK(d["inputs"]["pipeline_parallel"] == 2);
  REQUIRE(d["devices"].size() == 4);
  // Stage 0 takes 17 layers, stage 1 15 and the lm_head (2.4 layers' weights):
  // layers of 4 of the 8 KV heads of 128 values, f16.
  for (const auto& dev : d["devices"])
    CHECK(dev["kv_bytes_per_token"] == 2.0 * (dev["stage"] == 0 ? 17 : 15) * 4 * 128 * 2);
  CHECK(d["kv_bytes_per_token_per_device"] == 2.0 * 17 * 4 * 128 * 2);
  CHECK(d["pp_comm_bytes_per_step"] == 4096 * 2 + 128256 * 4);  // one boundary, then the logits to rank 0
  const RunResult refused = run_llmk({"estimate", "--preset", "llama3-8b", "--pp", "40"});
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Contains("parallel.pipeline 40 exceeds the model's 32 layers"));
}

TEST_CASE("llmk info names the KV dtype kv_cache.dtype resolves to, and why", "[cli][info][kv_dtype]") {
  const auto stories = info_json({"--model", kStories.string()});
  CHECK(stories["kv_dtype"] == "f32");
  CHECK(stories["kv_dtype_reason"] == "auto: F32 checkpoint");
  const auto tiny = info_json({"--preset", "tinyllama-1.1b"});  // F16 weights
  CHECK(tiny["kv_dtype"] == "f16");
  CHECK(tiny["kv_dtype_reason"] == "auto: F16 checkpoint");
  const auto pinned = info_json({"--preset", "tinyllama-1.1b", "--set", "kv_cache.dtype=i8"});
  CHECK(pinned["kv_dtype"] == "i8");
  CHECK(pinned["kv_dtype_reason"] == "kv_cache.dtype");
  const RunResult text = run_llmk({"info", "--model", kStories.string()});
  CHECK_THAT(text.out, Contains("f32 (auto: F32 checkpoint)"));
}

TEST_CASE("llmk info on broken model directories exits 1 with the file and tensor named", "[cli][info]") {
  struct Case {
    const char* what;
    std::function<void(const fs::path&, std::vector<TensorSpec>&)> breakit;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"truncated file",
       [](const fs::path& d, auto&) { write_file(d / "model.safetensors", "abc"); },
       {"model.safetensors", "shorter than the 8-byte"}},
      {"header not JSON",
       [](const fs::path& d, auto&) { write_file(d / "model.safetensors", safetensors_bytes("{oops", "")); },
       {"model.safetensors", "not valid JSON"}},
      {"missing tensor",
       [](const fs::path& d, std::vector<TensorSpec>& t) {
         std::erase_if(t, [](const TensorSpec& x) { return x.name == "model.embed_tokens.weight"; });
         write_safetensors(d / "model.safetensors", t);
       },
       {"model.safetensors: tensor 'model.embed_tokens.weight': missing"}},
      {"wrong shape",
       [](const fs::path& d, std::vector<TensorSpec>& t) {
         for (auto& x : t)
           if (x.name == "model.layers.1.mlp.up_proj.weight") x.shape = {16, 40};
         write_safetensors(d / "model.safetensors", t);
       },
       {"tensor 'model.layers.1.mlp.up_proj.weight'", "does not match"}},
      {"bad config value",
       [](const fs::path& d, auto&) {
         auto j = config_json(tiny_llama_config());
         j["num_key_value_heads"] = 3;
         write_config_json(d, j);
       },
       {"config.json", "num_key_value_heads=3 does not divide num_attention_heads=4"}},
      {"rope scaling",
       [](const fs::path& d, auto&) {
         auto j = config_json(tiny_llama_config());
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
         write_config_json(d, j);
       },
       {"config.json", "rope_scaling of type 'yarn'"}},
      {"config not JSON", [](const fs::path& d, auto&) { write_file(d / "config.json", "{,}"); },
       {"config.json", "not valid JSON"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    TempDir dir;
    auto tensors = write_model_dir(dir.path(), tiny_llama_config(), 1);
    c.breakit(dir.path(), tensors);
    const RunResult r = run_llmk({"info", "--model", dir.path().string()});
    INFO(r.err);
    CHECK(r.exit_code == 1);
    for (const auto& e : c.expect) CHECK_THAT(r.err, Contains(e));
    CHECK(r.out.empty());
  }
}

TEST_CASE("llmk info on a sharded directory with a missing shard exits 1", "[cli][info]") {
  TempDir dir;
  write_sharded_model_dir(dir.path(), tiny_llama_config(), 1, 2);
  CHECK(run_llmk({"info", "--model", dir.path().string()}).exit_code == 0);
  fs::remove(dir.path() / "model-00001-of-00002.safetensors");
  const RunResult r = run_llmk({"info", "--model", dir.path().string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("model.safetensors.index.json") && Contains("model-00001-of-00002.safetensors"));
}

TEST_CASE("llmk info refuses bad options with the key named", "[cli][info]") {
  RunResult r = run_llmk({"info"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("--model"));

  r = run_llmk({"info", "--model", "/nonexistent/model"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("/nonexistent/model"));

  r = run_llmk({"info", "--preset", "llama-110m", "--set", "scheduler.max_num_seq=4"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("unknown key 'scheduler.max_num_seq'") && Contains("max_num_seqs"));

  r = run_llmk({"info", "--preset", "llama-110m", "--set", "kv_cache.block_size=3"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("kv_cache.block_size") && Contains("8 to 256"));

  TempDir dir;
  write_file(dir.path() / "c.yaml", "kv_cache:\n  dtype: i4\n");
  r = run_llmk({"info", "--preset", "llama-110m", "--config", (dir.path() / "c.yaml").string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("c.yaml") && Contains("kv_cache.dtype"));

  r = run_llmk({"info", "--load-format", "pickle"});
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != -1);
}
