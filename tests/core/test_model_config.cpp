// config.json parsing: defaults, Mistral, Qwen2, rope scaling, special tokens from the side files,
// sizes, and refusals that name the file, the key and what is wrong.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/model_config.hpp"
#include "core/safetensors_writer.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;
using nlohmann::json;

namespace {

json base_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
    "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512
  })");
}

// The message of the Error parsing `j` throws, checking its code.
std::string parse_error(const json& j, ErrorCode code = ErrorCode::bad_checkpoint) {
  try {
    parse_model_config_json(j.dump(), "dir/config.json");
  } catch (const Error& e) {
    CHECK(std::string(to_string(e.code())) == to_string(code));
    return e.what();
  }
  FAIL("no error for " + j.dump());
  return "";
}

}  // namespace

TEST_CASE("absent optional keys take transformers' defaults", "[model_config]") {
  const ModelConfig c = parse_model_config_json(base_config().dump(), "config.json");
  CHECK(c.head_dim == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.rms_norm_eps == 1e-6f);
  CHECK(c.rope_theta == 10000.0f);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.dtype == DType::f32);
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<int32_t>{2});

  json j = base_config();
  j.erase("num_key_value_heads");
  CHECK(parse_model_config_json(j.dump(), "config.json").num_kv_heads == 8);
}

TEST_CASE("an explicit head_dim need not divide hidden_size", "[model_config]") {
  json j = base_config();
  j["head_dim"] = 12;
  j["hidden_size"] = 60;
  const ModelConfig c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.head_dim == 12);
  CHECK(c.num_parameters() == 512 * 60 * 2 + 5 * (60 * 96 * 2 + 2 * 60 * 48 + 3 * 60 * 172 + 2 * 60) + 60);
}

TEST_CASE("Mistral configs load with their sliding window, shorter than the context or not", "[model_config]") {
  json j = base_config();
  j["architectures"] = {"MistralForCausalLM"};
  j["max_position_embeddings"] = 4096;
  j["sliding_window"] = nullptr;
  CHECK_FALSE(parse_model_config_json(j.dump(), "config.json").sliding_window.has_value());
  j["sliding_window"] = 4096;
  const ModelConfig c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.architecture == "MistralForCausalLM");
  CHECK(c.sliding_window == 4096);
  j["sliding_window"] = 1024;
  CHECK(parse_model_config_json(j.dump(), "config.json").sliding_window == 1024);
  j["sliding_window"] = 0;
  CHECK_THAT(parse_error(j), Contains("sliding_window=0 is out of range"));
}

TEST_CASE("Qwen2 configs load with q/k/v biases and without their unused window", "[model_config]") {
  json j = base_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["sliding_window"] = 32768;
  j["use_sliding_window"] = false;
  j["max_window_layers"] = 5;
  j["tie_word_embeddings"] = true;
  j["rope_theta"] = 1000000.0;
  const ModelConfig c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.architecture == "Qwen2ForCausalLM");
  CHECK(c.attention_bias);
  CHECK_FALSE(c.sliding_window.has_value());
  CHECK(c.rope_theta == 1000000.0f);
  // Biases: 64 (q) + 2 x 32 (k, v) per layer on top of the bias-free count.
  json no_bias = j;
  no_bias["architectures"] = {"LlamaForCausalLM"};
  no_bias.erase("sliding_window");
  CHECK(c.num_parameters() == parse_model_config_json(no_bias.dump(), "c").num_parameters() + 5 * (64 + 2 * 32));
  json by_type = base_config();
  by_type.erase("architectures");
  by_type["model_type"] = "qwen2";
  CHECK(parse_model_config_json(by_type.dump(), "c").architecture == "Qwen2ForCausalLM");
  j["use_sliding_window"] = true;
  CHECK_THAT(parse_error(j, ErrorCode::unsupported), Contains("use_sliding_window=true is not supported"));
}

TEST_CASE("llama3 and linear rope scaling are read under rope_type or type", "[model_config]") {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"},   {"factor", 32.0},
                       {"low_freq_factor", 1.0},  {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.rope_scaling.type == RopeScalingType::llama3);
  CHECK(c.rope_scaling.factor == 32.0f);
  CHECK(c.rope_scaling.low_freq_factor == 1.0f);
  CHECK(c.rope_scaling.high_freq_factor == 4.0f);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.rope_scaling.type == RopeScalingType::linear);
  CHECK(c.rope_scaling.factor == 2.0f);
  j["rope_scaling"] = {{"rope_type", "default"}};
  CHECK(parse_model_config_json(j.dump(), "config.json").rope_scaling.type == RopeScalingType::none);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK_THAT(parse_error(j), Contains("rope_scaling.low_freq_factor must be a positive number"));
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0},
                       {"original_max_position_embeddings", 8192}};
  CHECK_THAT(parse_error(j), Contains("low_freq_factor must be below high_freq_factor"));
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -2.0}};
  CHECK_THAT(parse_error(j), Contains("rope_scaling.factor must be a positive number"));
  j["rope_scaling"] = {{"factor", 2.0}};
  CHECK_THAT(parse_error(j), Contains("rope_scaling has no string 'rope_type' or 'type'"));
}

TEST_CASE("torch_dtype and eos lists are read", "[model_config]") {
  json j = base_config();
  j["torch_dtype"] = "bfloat16";
  j["eos_token_id"] = {2, 7};
  j["tie_word_embeddings"] = true;
  const ModelConfig c = parse_model_config_json(j.dump(), "config.json");
  CHECK(c.dtype == DType::bf16);
  CHECK(c.eos_token_ids == std::vector<int32_t>{2, 7});
  CHECK(c.tie_word_embeddings);
  j["torch_dtype"] = "float16";
  CHECK(parse_model_config_json(j.dump(), "config.json").dtype == DType::f16);
}

TEST_CASE("generation_config.json and tokenizer_config.json override special tokens", "[model_config]") {
  TempDir dir;
  write_file(dir.path() / "config.json", base_config().dump());
  write_file(dir.path() / "generation_config.json", R"({"bos_token_id": 3, "eos_token_id": [4, 5], "top_p": 0.9})");
  write_file(dir.path() / "tokenizer_config.json", R"({"add_bos_token": false, "chat_template": "x"})");
  const ModelConfig c = load_model_config(dir.path());
  CHECK(c.bos_token_id == 3);
  CHECK(c.eos_token_ids == std::vector<int32_t>{4, 5});
  CHECK_FALSE(c.add_bos_token);

  write_file(dir.path() / "generation_config.json", R"({"eos_token_id": 600})");
  try {
    load_model_config(dir.path());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("eos_token_id 600") && Contains("vocab_size=512"));
  }
  write_file(dir.path() / "generation_config.json", R"({"eos_token_id": "two"})");
  CHECK_THROWS_WITH(load_model_config(dir.path()), Contains("generation_config.json") && Contains("eos_token_id"));
  write_file(dir.path() / "generation_config.json", "{");
  CHECK_THROWS_WITH(load_model_config(dir.path()), Contains("generation_config.json") && Contains("not valid JSON"));
}

TEST_CASE("a missing config.json is named", "[model_config]") {
  TempDir dir;
  CHECK_THROWS_WITH(load_model_config(dir.path()), Contains("config.json") && Contains("not found"));
}

TEST_CASE("bad sizes are refused naming the key and the value", "[model_config]") {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"hidden_size", -64, "hidden_size=-64 is out of range"},
      {"hidden_size", 0, "hidden_size=0 is out of range"},
      {"intermediate_size", "172", "intermediate_size=\"172\" is not an integer"},
      {"num_hidden_layers", 2.5, "num_hidden_layers=2.5 is not an integer"},
      {"num_attention_heads", 0, "num_attention_heads=0"},
      {"num_key_value_heads", 3, "num_key_value_heads=3 does not divide num_attention_heads=8"},
      {"num_attention_heads", 7, "num_key_value_heads=4 does not divide num_attention_heads=7"},
      {"head_dim", 7, "head_dim=7 must be even"},
      {"vocab_size", -1, "vocab_size=-1"},
      {"vocab_size", 4294967296LL, "vocab_size=4294967296 is out of range"},
      {"max_position_embeddings", 0, "max_position_embeddings=0"},
      {"rms_norm_eps", 0, "rms_norm_eps=0 must be a positive number"},
      {"rope_theta", -1.0, "rope_theta=-1.0 must be a positive number"},
      {"tie_word_embeddings", "yes", "tie_word_embeddings=\"yes\" is not a boolean"},
      {"eos_token_id", json::array(), "eos_token_id is an empty list"},
      {"eos_token_id", json::array({2, 512}), "eos_token_id 512 is outside the vocabulary (vocab_size=512)"},
      {"bos_token_id", 999, "bos_token_id 999 is outside the vocabulary"},
      {"architectures", "LlamaForCausalLM", "architectures=\"LlamaForCausalLM\" must be a list"},
  };
  for (const auto& c : cases) {
    json j = base_config();
    j[c.key] = c.value;
    INFO(j.dump());
    CHECK_THAT(parse_error(j), Contains("dir/config.json: ") && Contains(c.expect));
  }
  json j = base_config();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 6;
  CHECK_THAT(parse_error(j), Contains("num_attention_heads=6 does not divide hidden_size=64"));
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size"}) {
    json missing = base_config();
    missing.erase(key);
    CHECK_THAT(parse_error(missing), Contains(std::string("missing required key '") + key + "'"));
  }
}

TEST_CASE("features the engine does not implement are refused, never ignored", "[model_config]") {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 8.0}};
  CHECK_THAT(parse_error(j, ErrorCode::unsupported), Contains("rope_scaling of type 'dynamic' is not supported"));
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  CHECK_THAT(parse_error(j, ErrorCode::unsupported), Contains("rope_scaling of type 'yarn' is not supported"));
  j["rope_scaling"] = nullptr;
  CHECK_NOTHROW(parse_model_config_json(j.dump(), "c"));

  for (const auto& [key, value, expect] : std::vector<std::tuple<const char*, json, const char*>>{
           {"hidden_act", "gelu", "hidden_act=\"gelu\" is not supported"},
           {"attention_bias", true, "attention_bias=true is not supported"},
           {"mlp_bias", true, "mlp_bias=true is not supported"},
           {"torch_dtype", "float8_e4m3fn", "torch_dtype=\"float8_e4m3fn\" is not supported"},
           {"architectures", json::array({"GPT2LMHeadModel"}), "'GPT2LMHeadModel' is not supported"},
           {"quantization_config", json::object({{"quant_method", "fp8"}}), "quant_method 'fp8' is not supported"},
       }) {
    json k = base_config();
    k[key] = value;
    CHECK_THAT(parse_error(k, ErrorCode::unsupported), Contains("dir/config.json: ") && Contains(expect));
  }
}

TEST_CASE("config.json that is not a JSON object is refused", "[model_config]") {
  CHECK_THROWS_WITH(parse_model_config_json("{", "m/config.json"), Contains("m/config.json: not valid JSON"));
  CHECK_THROWS_WITH(parse_model_config_json("[1]", "m/config.json"), Contains("m/config.json: not a JSON object"));
}

TEST_CASE("KV bytes per token count K and V of every layer, plus i8 scales", "[model_config]") {
  const ModelConfig c = parse_model_config_json(base_config().dump(), "config.json");  // 5 layers, 4 kv heads, hd 8
  CHECK(c.kv_bytes_per_token(DType::f32) == 2 * 5 * 4 * 8 * 4);
  CHECK(c.kv_bytes_per_token(DType::i8) == 2 * 5 * 4 * 8 + 2 * 5 * 4 * 1 * 4);  // one scale per 8
  CHECK(c.kv_bytes_per_token(DType::i8, 4) == 2 * 5 * 4 * 8 + 2 * 5 * 4 * 2 * 4);
  const ModelConfig tiny = *model_preset("tinyllama-1.1b");
  CHECK(tiny.kv_bytes_per_token() == 2 * 22 * 4 * 64 * 4);  // 45056
}

TEST_CASE("a preset may be a config.json file or a model directory", "[model_config]") {
  TempDir dir;
  write_file(dir.path() / "config.json", base_config().dump());
  CHECK(model_preset((dir.path() / "config.json").string())->hidden_size == 64);
  CHECK(model_preset(dir.path().string())->vocab_size == 512);
  write_file(dir.path() / "config.json", "{");
  CHECK_THROWS_AS(model_preset((dir.path() / "config.json").string()), Error);
}
