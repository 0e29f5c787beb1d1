// Engine configuration: config/default.yaml is exactly the built-in defaults,
// overrides and files apply, and every refusal names its key.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/safetensors_writer.hpp"

using namespace llmk;
using Catch::Contains;

namespace {

const std::filesystem::path kDefaultYaml = std::filesystem::path(LLMK_SOURCE_DIR) / "config" / "default.yaml";

// The message of the Error(invalid_config) that `f` throws.
template <typename F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_config);
    return e.what();
  }
  FAIL("no error");
  return "";
}

EngineConfig with(std::initializer_list<const char*> overrides) {
  EngineConfig c;
  for (const char* o : overrides) apply_override(c, o);
  return c;
}

}  // namespace

TEST_CASE("config/default.yaml parses to exactly the built-in defaults", "[config]") {
  EngineConfig from_file;
  apply_yaml_file(from_file, kDefaultYaml);
  CHECK(from_file == EngineConfig{});
  // Starting from other values proves the file sets every key.
  EngineConfig changed = with({"model.seed=9", "executor.device=cuda", "kv_cache.block_size=32",
                               "plugins.search_path=a,b", "server.drain_timeout_s=1.5", "kv_cache.dtype=i8"});
  apply_yaml_file(changed, kDefaultYaml);
  CHECK(changed == EngineConfig{});
  CHECK_NOTHROW(validate(from_file));
}

TEST_CASE("config/cpu-throughput.yaml validates and sets what it says", "[config]") {
  EngineConfig c;
  apply_yaml_file(c, std::filesystem::path(LLMK_SOURCE_DIR) / "config" / "cpu-throughput.yaml");
  CHECK_NOTHROW(validate(c));
  CHECK(c.kv_cache.dtype == DType::f16);
  CHECK(c.kv_cache.prefault);
  CHECK(c.plugins.kv_allocator == "kv.paged");
  CHECK(nlohmann::json::parse(c.plugins.linear_options) ==
        nlohmann::json{{"weight_dtype", "bf16"}, {"bf16_activations", true}});
  CHECK(c.model == EngineConfig{}.model);  // only serving knobs, no model
}

TEST_CASE("config/default.yaml documents every key, and only those", "[config]") {
  // Read the file as text: "section:" lines, then "  key:" lines under them.
  // A key is documented by the comment lines just above it, or shares the
  // comment of the key right above it (a group of related keys).
  std::ifstream in(kDefaultYaml);
  REQUIRE(in);
  std::set<std::string> in_file;
  std::map<std::string, bool> commented;
  std::string line, section;
  bool comment_above = false, previous_key_commented = false, previous_was_key = false;
  const std::regex section_re(R"(^([a-z_]+):\s*$)"), key_re(R"(^  ([a-z_]+):)"), comment_re(R"(^\s*#)");
  std::smatch m;
  while (std::getline(in, line)) {
    const bool is_key = std::regex_search(line, m, key_re);
    if (is_key) {
      const std::string key = section + "." + std::string(m[1]);
      in_file.insert(key);
      commented[key] = comment_above || (previous_was_key && previous_key_commented);
      previous_key_commented = commented[key];
      comment_above = false;
    } else if (std::regex_search(line, m, section_re)) {
      section = m[1];
      comment_above = false;
    } else if (std::regex_search(line, comment_re)) {
      comment_above = true;
    }
    previous_was_key = is_key;
  }
  const auto keys = config_keys();
  CHECK(in_file == std::set<std::string>(keys.begin(), keys.end()));
  for (const auto& [key, has_comment] : commented) {
    INFO(key);
    CHECK(has_comment);
  }
}

TEST_CASE("to_yaml reads back to the same config", "[config]") {
  EngineConfig c = with({"model.path=/models/x y", "model.seed=18446744073709551615", "executor.num_threads=3",
                         "plugins.search_path=[/a, \"/b,c\"]", "plugins.linear_options={group_size: 32, name: q8}",
                         "kv_cache.capacity_fraction=0.1", "kv_cache.capacity_bytes=3GiB",
                         "kv_cache.enable_prefix_caching=false", "kv_cache.dtype=i8", "server.zmq=",
                         "server.served_model_name=a: \"quoted\" # not a comment"});
  EngineConfig back;
  apply_yaml(back, to_yaml(c), "to_yaml");
  CHECK(back == c);
  CHECK(c.model.seed == 18446744073709551615ull);
  CHECK(c.kv_cache.capacity_bytes == 3ull << 30);
  CHECK(c.plugins.search_path == std::vector<std::string>{"/a", "/b,c"});
  CHECK(c.server.served_model_name == "a: \"quoted\" # not a comment");
  CHECK(nlohmann::json::parse(c.plugins.linear_options) == nlohmann::json{{"group_size", 32}, {"name", "q8"}});
}

TEST_CASE("a YAML file, then overrides, then validation", "[config]") {
  llmk::test::TempDir dir;
  llmk::test::write_file(dir.path() / "c.yaml", R"(
scheduler:
  max_num_seqs: 8
  policy: static
kv_cache:
  dtype: i8
  capacity_bytes: 512MiB
plugins:
  attention_options: {block: 64}
  search_path: [/opt/plugins]
)");
  const EngineConfig c = load_config(dir.path() / "c.yaml", {"scheduler.max_num_seqs=32", "plugins.search_path=x,y"});
  CHECK(c.scheduler.max_num_seqs == 32);
  CHECK(c.scheduler.policy == "static");
  CHECK(c.kv_cache.dtype == DType::i8);
  CHECK(c.kv_cache.capacity_bytes == 512ull << 20);
  CHECK(c.plugins.search_path == std::vector<std::string>{"x", "y"});
  CHECK(nlohmann::json::parse(c.plugins.attention_options) == nlohmann::json{{"block", 64}});
  CHECK(c.scheduler.max_num_batched_tokens == 512);  // untouched

  CHECK_THROWS_WITH(load_config(dir.path() / "missing.yaml", {}), Contains("missing.yaml"));
  llmk::test::write_file(dir.path() / "bad.yaml", "scheduler: [1, 2\n");
  CHECK_THAT(config_error([&] { load_config(dir.path() / "bad.yaml", {}); }),
             Contains("bad.yaml") && Contains("not valid YAML"));
}

TEST_CASE("unknown keys and sections are refused with the valid ones listed", "[config]") {
  EngineConfig c;
  CHECK_THAT(config_error([&] { apply_override(c, "scheduler.max_seqs=3"); }),
             Contains("unknown key 'scheduler.max_seqs'") && Contains("max_num_seqs, max_num_batched_tokens"));
  CHECK_THAT(config_error([&] { apply_override(c, "schedular.max_num_seqs=3"); }),
             Contains("unknown section 'schedular'") && Contains("model, executor, plugins"));
  CHECK_THAT(config_error([&] { apply_yaml(c, "kv_cache:\n  blocksize: 4\n", "f.yaml"); }),
             Contains("f.yaml") && Contains("unknown key 'kv_cache.blocksize'") && Contains("block_size"));
  CHECK_THAT(config_error([&] { apply_yaml(c, "gpu:\n  x: 1\n", "f.yaml"); }),
             Contains("f.yaml") && Contains("unknown section 'gpu'"));
  CHECK_THAT(config_error([&] { apply_yaml(c, "- a\n- b\n", "f.yaml"); }), Contains("f.yaml") && Contains("mapping"));
  CHECK_THAT(config_error([&] { apply_override(c, "max_num_seqs=3"); }), Contains("not a dotted key"));
  CHECK_THAT(config_error([&] { apply_override(c, "scheduler.max_num_seqs"); }), Contains("KEY=VALUE"));
}

TEST_CASE("values of the wrong type are refused naming the key", "[config]") {
  EngineConfig c;
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"scheduler.max_num_seqs=abc", "scheduler.max_num_seqs: expected a non-negative integer, got 'abc'"},
      {"scheduler.max_num_seqs=-1", "scheduler.max_num_seqs: expected a non-negative integer"},
      {"scheduler.max_num_seqs=4294967296", "scheduler.max_num_seqs: expected a non-negative integer in [0, "},
      {"scheduler.max_num_seqs=1.5", "scheduler.max_num_seqs: expected a non-negative integer"},
      {"executor.num_threads=many", "executor.num_threads: expected an integer"},
      {"kv_cache.capacity_fraction=half", "kv_cache.capacity_fraction: expected a number"},
      {"kv_cache.capacity_bytes=3 apples", "kv_cache.capacity_bytes: expected a non-negative integer (optionally"},
      {"kv_cache.enable_prefix_caching=maybe", "kv_cache.enable_prefix_caching: expected true or false"},
      {"kv_cache.dtype=f64", "kv_cache.dtype: unknown dtype 'f64'"},
      {"plugins.linear_options=[1, 2]", "plugins.linear_options: expected a JSON object"},
      {"plugins.linear_options=nope", "plugins.linear_options: expected a JSON object"},
      {"scheduler.policy=[a, b]", "scheduler.policy: expected a string, got a list or mapping"},
  };
  for (const auto& [override_text, expect] : cases) {
    INFO(override_text);
    CHECK_THAT(config_error([&] { apply_override(c, override_text); }),
               Contains(std::string("--set ") + override_text) && Contains(expect));
  }
  CHECK_THAT(config_error([&] { apply_yaml(c, "scheduler:\n  max_num_seqs:\n", "f.yaml"); }),
             Contains("f.yaml: scheduler.max_num_seqs: expected an integer, got nothing"));
}

TEST_CASE("every validation error names its key and what is allowed", "[config]") {
  std::vector<std::pair<std::vector<const char*>, std::vector<const char*>>> cases = {
      {{"model.load_format=pickle"}, {"model.load_format", "'pickle'", "auto, safetensors, gguf, dummy"}},
      {{"model.load_format=dummy"}, {"model.preset", "required with load_format dummy"}},
      {{"model.load_format=safetensors"}, {"model.path", "required with load_format safetensors"}},
      {{"model.chat_template=vicuna"}, {"model.chat_template", "'vicuna'", "llama-2, chatml"}},
      {{"executor.device=tpu"}, {"executor.device", "'tpu'", "cpu, cuda"}},
      {{"executor.num_threads=-2"}, {"executor.num_threads", "out of range"}},
      {{"plugins.attention="}, {"plugins.attention", "must name a plugin"}},
      {{"kv_cache.capacity_fraction=0"}, {"kv_cache.capacity_fraction", "(0, 1]"}},
      {{"kv_cache.capacity_fraction=1.5"}, {"kv_cache.capacity_fraction", "(0, 1]"}},
      {{"kv_cache.block_size=4"}, {"kv_cache.block_size", "8 to 256"}},
      {{"kv_cache.block_size=512"}, {"kv_cache.block_size", "8 to 256"}},
      {{"kv_cache.dtype=u8"}, {"kv_cache.dtype", "'u8'", "f32, f16, bf16, i8"}},
      {{"kv_cache.group_size=0"}, {"kv_cache.group_size", "1 to 256"}},
      {{"scheduler.policy=fifo"}, {"scheduler.policy", "'fifo'", "continuous, static"}},
      {{"scheduler.preemption=swap"}, {"scheduler.preemption", "'swap'", "recompute, offload"}},
      {{"scheduler.max_num_seqs=0"}, {"scheduler.max_num_seqs", ">= 1"}},
      {{"scheduler.max_num_batched_tokens=0"}, {"scheduler.max_num_batched_tokens", ">= 1"}},
      {{"scheduler.max_queue=0"}, {"scheduler.max_queue", ">= 1"}},
      {{"server.http=localhost"}, {"server.http", "HOST:PORT"}},
      {{"server.http=localhost:70000"}, {"server.http", "1..65535"}},
      {{"server.zmq=localhost:5555"}, {"server.zmq", "tcp://"}},
      {{"server.max_body_bytes=0"}, {"server.max_body_bytes", ">= 1"}},
      {{"server.drain_timeout_s=-1"}, {"server.drain_timeout_s", ">= 0"}},
      {{"server.io_timeout_s=0"}, {"server.io_timeout_s", "> 0 seconds"}},
      {{"server.io_timeout_s=-5"}, {"server.io_timeout_s", "> 0 seconds"}},
      {{"server.poll_keep_s=0"}, {"server.poll_keep_s", "> 0 seconds"}},
      {{"server.poll_max_finished=0"}, {"server.poll_max_finished", ">= 1"}},
      {{"server.poll_max_wait_s=-1"}, {"server.poll_max_wait_s", ">= 0"}},
      {{"parallel.steps_in_flight=3"}, {"parallel.steps_in_flight", "exceeds the 1 pipeline stages"}},
  };
  // A device is refused only by a build without its executor.
  if (!has_executor("cuda"))
    cases.push_back({{"executor.device=cuda"}, {"executor.device", "'cuda' has no executor in this build", "built: cpu"}});
  for (const auto& [overrides, expects] : cases) {
    INFO(overrides[0]);
    const std::string msg = config_error([&] {
      EngineConfig c;
      for (const char* o : overrides) apply_override(c, o);
      validate(c);
    });
    CHECK(msg.rfind(expects[0], 0) == 0);  // starts with the key
    for (const char* e : expects) CHECK_THAT(msg, Contains(e));
  }
}

TEST_CASE("valid non-default settings pass validation", "[config]") {
  CHECK_NOTHROW(validate(with({"model.load_format=dummy", "model.preset=llama-110m",
                               "kv_cache.dtype=i8", "kv_cache.group_size=32", "kv_cache.block_size=256",
                               "kv_cache.capacity_fraction=1", "scheduler.policy=static",
                               "scheduler.preemption=offload", "server.http=", "server.zmq=ipc:///tmp/llmk",
                               "server.io_timeout_s=0.25", "server.poll_max_wait_s=0", "server.poll_max_finished=1",
                               "model.chat_template=chatml"})));
}

TEST_CASE("a device with no executor in this build is refused, naming the built ones", "[config]") {
  for (const char* device : {"cpu", "cuda"}) {
    INFO(device);
    EngineConfig c = with({(std::string("executor.device=") + device).c_str()});
    if (has_executor(device)) {
      CHECK_NOTHROW(validate(c));
      continue;
    }
    const std::string msg = config_error([&] { validate(c); });
    CHECK(msg.rfind("executor.device", 0) == 0);
    CHECK_THAT(msg, Contains(std::string("'") + device + "' has no executor in this build"));
    CHECK_THAT(msg, Contains("(built: " + built_executor_device_names() + ")"));
  }
  // The list is the single source of truth: the CPU is always built, and
  // every entry names a device validate() accepts.
  REQUIRE(!built_executor_devices().empty());
  CHECK(built_executor_devices().front() == Device::cpu);
  for (Device d : built_executor_devices()) CHECK_NOTHROW(validate(with({(std::string("executor.device=") + device_name(d)).c_str()})));
}
