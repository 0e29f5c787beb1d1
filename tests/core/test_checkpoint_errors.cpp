// Broken checkpoints: every malformation is refused with
// Error(bad_checkpoint) naming the file and the tensor (or key).
#include <catch2/catch.hpp>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/safetensors_writer.hpp"

using namespace llmk;
using namespace llmk::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// The message of the Error that loading `dir` throws (fails the test when
// nothing or something else is thrown, or the code differs).
std::string load_error(const fs::path& dir, ErrorCode code = ErrorCode::bad_checkpoint) {
  try {
    load_checkpoint(dir);
  } catch (const Error& e) {
    CHECK(to_string(e.code()) == std::string(to_string(code)));
    return e.what();
  }
  FAIL("load_checkpoint did not throw");
  return "";
}

// A valid tiny model directory whose model.safetensors the test rewrites.
struct BrokenDir {
  TempDir dir;
  ModelConfig cfg = tiny_llama_config();
  std::vector<TensorSpec> tensors;
  BrokenDir() { tensors = write_model_dir(dir.path(), cfg, 1); }
  fs::path file() const { return dir.path() / "model.safetensors"; }
  // Rewrites the file from `tensors` after `edit` changed the header.
  template <typename Edit>
  void write_with_header_edit(Edit edit) {
    std::string data;
    nlohmann::json header = safetensors_header(tensors, data);
    edit(header, data);
    write_file(file(), safetensors_bytes(header.dump(), data));
  }
};

const std::string kK = "model.layers.0.self_attn.k_proj.weight";

}  // namespace

TEST_CASE("a file shorter than 8 bytes is refused", "[checkpoint][errors]") {
  BrokenDir b;
  write_file(b.file(), "abcd");
  CHECK_THAT(load_error(b.dir.path()), Contains(b.file().string()) && Contains("shorter than the 8-byte"));
}

TEST_CASE("a header length past the end of the file is refused", "[checkpoint][errors]") {
  BrokenDir b;
  std::string data;
  const auto header = safetensors_header(b.tensors, data).dump();
  write_file(b.file(), safetensors_bytes(header, data, header.size() + data.size() + 100));
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors") && Contains("larger than the file"));
}

TEST_CASE("an absurd header length is refused before reading", "[checkpoint][errors]") {
  BrokenDir b;
  write_file(b.file(), safetensors_bytes("{}", "", uint64_t(1) << 40));
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors") && Contains("absurd"));
}

TEST_CASE("a header that is not JSON, or not an object, is refused", "[checkpoint][errors]") {
  BrokenDir b;
  write_file(b.file(), safetensors_bytes("{\"a\": [1, 2", ""));
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors") && Contains("not valid JSON"));
  write_file(b.file(), safetensors_bytes("[1, 2]", ""));
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors") && Contains("not a JSON object"));
  // A number beyond double range: nlohmann reports it as out_of_range, not
  // parse_error (found by fuzz/safetensors_fuzz).
  write_file(b.file(), safetensors_bytes("{\"a\": 1e999}", ""));
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors") && Contains("not valid JSON") && Contains("1e999"));
}

TEST_CASE("a tensor entry without dtype, shape or data_offsets is refused", "[checkpoint][errors]") {
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    BrokenDir b;
    b.write_with_header_edit([&](nlohmann::json& h, std::string&) { h[kK].erase(key); });
    CHECK_THAT(load_error(b.dir.path()),
               Contains("model.safetensors: tensor '" + kK + "'") && Contains(std::string("missing '") + key + "'"));
  }
}

TEST_CASE("data offsets past the end of the data are refused", "[checkpoint][errors]") {
  BrokenDir b;
  b.write_with_header_edit([&](nlohmann::json& h, std::string& data) {
    h[kK]["data_offsets"] = {data.size() - 16, data.size() - 16 + 8 * 16 * 4};
  });
  CHECK_THAT(load_error(b.dir.path()), Contains("tensor '" + kK + "'") && Contains("past the end"));
}

TEST_CASE("reversed data offsets are refused", "[checkpoint][errors]") {
  BrokenDir b;
  b.write_with_header_edit([&](nlohmann::json& h, std::string&) {
    const uint64_t begin = h[kK]["data_offsets"][0], end = h[kK]["data_offsets"][1];
    h[kK]["data_offsets"] = {end, begin};
  });
  CHECK_THAT(load_error(b.dir.path()), Contains("tensor '" + kK + "'") && Contains("reversed"));
}

TEST_CASE("overlapping tensors are refused", "[checkpoint][errors]") {
  BrokenDir b;
  const std::string v = "model.layers.0.self_attn.v_proj.weight";  // same shape as k
  b.write_with_header_edit([&](nlohmann::json& h, std::string&) {
    const uint64_t begin = h[kK]["data_offsets"][0];
    h[v]["data_offsets"] = {begin + 4, begin + 4 + 8 * 16 * 4};
  });
  const std::string msg = load_error(b.dir.path());
  CHECK_THAT(msg, Contains("model.safetensors: tensor '") && Contains("overlap"));
  CHECK_THAT(msg, Contains(kK) && Contains(v));
}

TEST_CASE("a byte size that does not match shape x dtype is refused", "[checkpoint][errors]") {
  BrokenDir b;
  b.write_with_header_edit([&](nlohmann::json& h, std::string&) {
    const uint64_t begin = h[kK]["data_offsets"][0];
    h[kK]["data_offsets"] = {begin, begin + 100};
  });
  CHECK_THAT(load_error(b.dir.path()), Contains("tensor '" + kK + "'") && Contains("span 100 bytes") &&
                                           Contains("needs 512"));
}

TEST_CASE("a dtype other than F32, F16 or BF16 is refused", "[checkpoint][errors]") {
  BrokenDir b;
  for (auto& t : b.tensors)
    if (t.name == kK) t.dtype = "I32";  // same byte size as F32
  write_safetensors(b.file(), b.tensors);
  CHECK_THAT(load_error(b.dir.path()), Contains("tensor '" + kK + "'") && Contains("\"I32\" is not supported"));
}

TEST_CASE("a shape that does not match the config is refused", "[checkpoint][errors]") {
  BrokenDir b;
  for (auto& t : b.tensors)
    if (t.name == kK) t.shape = {16, 8};  // transposed: same bytes, wrong layout
  write_safetensors(b.file(), b.tensors);
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors: tensor '" + kK + "'") &&
                                           Contains("shape [16, 8] does not match the config's [8, 16]"));
}

TEST_CASE("a missing tensor is refused and named", "[checkpoint][errors]") {
  BrokenDir b;
  std::erase_if(b.tensors, [](const TensorSpec& t) { return t.name == "model.norm.weight"; });
  write_safetensors(b.file(), b.tensors);
  CHECK_THAT(load_error(b.dir.path()), Contains("model.safetensors: tensor 'model.norm.weight': missing"));
}

TEST_CASE("an untied model without lm_head.weight is refused", "[checkpoint][errors]") {
  BrokenDir b;
  std::erase_if(b.tensors, [](const TensorSpec& t) { return t.name == "lm_head.weight"; });
  write_safetensors(b.file(), b.tensors);
  CHECK_THAT(load_error(b.dir.path()), Contains("tensor 'lm_head.weight': missing"));
}

TEST_CASE("unexpected tensors are refused and named", "[checkpoint][errors]") {
  for (const std::string extra : {"model.layers.0.self_attn.q_proj.bias", "model.layers.2.input_layernorm.weight"}) {
    BrokenDir b;
    b.tensors.push_back({extra, "F32", {16}, random_tensor_bytes("F32", 16, 1)});
    write_safetensors(b.file(), b.tensors);
    CHECK_THAT(load_error(b.dir.path()), Contains("tensor '" + extra + "'") && Contains("unexpected"));
  }
}

TEST_CASE("a tied lm_head.weight of the wrong shape is refused", "[checkpoint][errors]") {
  TempDir dir;
  ModelConfig cfg = tiny_llama_config();
  cfg.tie_word_embeddings = true;
  write_config_json(dir.path(), config_json(cfg));
  auto tensors = llama_tensors(cfg, 2);
  tensors.push_back({"lm_head.weight", "F32", {8, 16}, random_tensor_bytes("F32", 8 * 16, 4)});
  write_safetensors(dir.path() / "model.safetensors", tensors);
  CHECK_THAT(load_error(dir.path()), Contains("tensor 'lm_head.weight'") && Contains("does not match"));
}

TEST_CASE("an index pointing at a missing shard is refused", "[checkpoint][errors]") {
  TempDir dir;
  write_sharded_model_dir(dir.path(), tiny_llama_config(), 1, 3);
  fs::remove(dir.path() / "model-00002-of-00003.safetensors");
  CHECK_THAT(load_error(dir.path()), Contains("model.safetensors.index.json: tensor '") &&
                                         Contains("shard 'model-00002-of-00003.safetensors' not found"));
}

TEST_CASE("an index and its shards must agree", "[checkpoint][errors]") {
  TempDir dir;
  write_sharded_model_dir(dir.path(), tiny_llama_config(), 1, 2);
  auto index = nlohmann::json::parse(read_file(dir.path() / "model.safetensors.index.json"));
  // Move one tensor's entry to the other shard: the index lies.
  const std::string shard = index["weight_map"]["model.norm.weight"];
  index["weight_map"]["model.norm.weight"] =
      shard == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                  : "model-00001-of-00002.safetensors";
  write_file(dir.path() / "model.safetensors.index.json", index.dump());
  CHECK_THAT(load_error(dir.path()),
             Contains("tensor 'model.norm.weight'") && Contains("absent from shard"));

  index.erase("weight_map");
  write_file(dir.path() / "model.safetensors.index.json", index.dump());
  CHECK_THAT(load_error(dir.path()), Contains("model.safetensors.index.json") && Contains("weight_map"));
}

TEST_CASE("a shard tensor missing from the index is refused", "[checkpoint][errors]") {
  TempDir dir;
  write_sharded_model_dir(dir.path(), tiny_llama_config(), 1, 2);
  auto index = nlohmann::json::parse(read_file(dir.path() / "model.safetensors.index.json"));
  index["weight_map"].erase("model.norm.weight");
  write_file(dir.path() / "model.safetensors.index.json", index.dump());
  CHECK_THAT(load_error(dir.path()), Contains("tensor 'model.norm.weight'") && Contains("not listed in"));
}

TEST_CASE("a directory without safetensors weights is refused", "[checkpoint][errors]") {
  BrokenDir b;
  fs::remove(b.file());
  CHECK_THAT(load_error(b.dir.path()), Contains(b.dir.path().string()) && Contains("no model.safetensors"));
}

TEST_CASE("a missing model directory is reported as not found", "[checkpoint][errors]") {
  CHECK_THAT(load_error("/nonexistent/model", ErrorCode::not_found), Contains("/nonexistent/model"));
}

TEST_CASE("a missing --model path names what was looked for: a GGUF file or a model directory", "[checkpoint][errors]") {
  const auto open_error = [](const std::string& path) -> std::string {
    ModelSection s;
    s.path = path;
    try {
      open_model(s);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::not_found);
      return e.what();
    }
    FAIL("open_model did not throw");
    return "";
  };
  CHECK(open_error("/nonexistent/missing.gguf") ==
        "model.path: '/nonexistent/missing.gguf' does not exist (looked for a GGUF file)");
  CHECK(open_error("/nonexistent/model") ==
        "model.path: '/nonexistent/model' does not exist (looked for a Hugging Face model directory or a GGUF file)");
  TempDir dir;
  write_file(dir.path() / "weights.bin", "not a model");
  ModelSection s;
  s.path = (dir.path() / "weights.bin").string();
  CHECK_THROWS_WITH(open_model(s), Contains("weights.bin: a file that is neither GGUF"));
}

TEST_CASE("a config.json that is not JSON is refused naming the file", "[checkpoint][errors]") {
  BrokenDir b;
  write_file(b.dir.path() / "config.json", "{\"hidden_size\": 16,");
  CHECK_THAT(load_error(b.dir.path()), Contains("config.json") && Contains("not valid JSON"));
}
