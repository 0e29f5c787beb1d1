// POST /v1/embeddings on `llmk serve` with stories260K, through the openai
// SDK: float and base64 vectors against the float64 NumPy forward of
// tests/core/embedding_reference.py, greedy generation unchanged beside
// embedding requests, and a text longer than the context refused naming it.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "serve_process.hpp"
#include "support.hpp"
#include "support/command.hpp"
#include "support/golden.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using llmk::test::curl;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

// Relative L2 error of the f32 forward against float64: as test_core's [embedding].
constexpr double kTolerance = 1e-4;

// `python SCRIPT ARGS < input`, its stdout as JSON.
json run_python(const std::string& script_and_args, const std::string& input) {
  const fs::path in = fs::temp_directory_path() / ("llmk_embeddings_serve_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(in) << input;
  const test::CommandResult r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() +
                                                  " " + script_and_args + " < " + in.string());
  fs::remove(in);
  INFO(r.out);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

double rel_l2(const json& got, const json& want) {
  const std::vector<float> g = got.get<std::vector<float>>();
  const std::vector<double> w = want.get<std::vector<double>>();
  REQUIRE(g.size() == w.size());
  return test::rel_l2(g.data(), w);
}

// The golden prompts with text (their ids are what the engine's tokenizer
// makes of them: BOS and the text).
std::vector<test::GoldenCase> text_cases() {
  std::vector<test::GoldenCase> out;
  for (const auto& c : test::golden_cases())
    if (!c.prompt.empty()) out.push_back(c);
  return out;
}

bool serve_embeds() {
  // A parallel serve (LLMK_TEST_SERVE_RANKS) has no hidden-state path.
  return ServeProcess::parallel_ranks() <= 1;
}

const std::vector<std::string> kServeArgs = {"--set", "kv_cache.dtype=f32"};

}  // namespace

TEST_CASE("The openai SDK's embeddings from llmk serve match the float64 reference, as floats and as base64",
          "[serve][embeddings]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  if (!serve_embeds()) LLMK_SKIP("embeddings are not served by a parallel job");
  const auto cases = text_cases();
  json texts = json::array(), ids = json::array();
  int64_t num_tokens = 0;
  for (const auto& c : cases) {
    texts.push_back(c.prompt);
    ids.push_back(c.input_ids);
    num_tokens += static_cast<int64_t>(c.input_ids.size());
  }
  const json ref = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/core/embedding_reference.py embed " +
                                  test::stories_dir(),
                              json{{"inputs", ids}}.dump());
  ServeProcess serve(kServeArgs);
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  const json got = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/ipc/openai_embeddings_client.py " +
                                  std::to_string(serve.http_port()) + " vectors",
                              json{{"texts", texts}, {"ids", ids}}.dump());
  CHECK(got["prompt_tokens"] == num_tokens);
  // The explicit base64 strings, decoded as the SDK decodes them, are the float answers' exact float32 values.
  std::string lines;
  for (const auto& b64 : got["base64_raw"]) lines += b64.get<std::string>() + "\n";
  const json decoded = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/core/embedding_reference.py decode", lines);
  REQUIRE(decoded.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("input '" << cases[i].prompt << "'");
    const json& want = ref["embeddings"][i];
    CHECK(rel_l2(got["float_last"][i], want["last_unit"]) < kTolerance);
    CHECK(rel_l2(got["base64_last"][i], want["last_unit"]) < kTolerance);
    CHECK(got["float_mean16"][i].size() == 16);
    CHECK(rel_l2(got["float_mean16"][i], want["mean_unit_dims"]) < kTolerance);
    CHECK(decoded[i].get<std::vector<float>>() == got["float_last"][i].get<std::vector<float>>());
  }
}

TEST_CASE("Embedding requests beside streaming greedy generations leave their text unchanged", "[serve][embeddings]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  if (!serve_embeds()) LLMK_SKIP("embeddings are not served by a parallel job");
  const auto cases = text_cases();
  json prompts = json::array();
  for (const auto& c : cases) prompts.push_back(c.prompt);
  ServeProcess serve(kServeArgs);
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  const auto max_tokens = static_cast<int32_t>(cases.front().greedy_ids.size());
  const json got = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/ipc/openai_embeddings_client.py " +
                                  std::to_string(serve.http_port()) + " beside",
                              json{{"prompts", prompts},
                                   {"max_tokens", max_tokens},
                                   {"text", "Once upon a time there was a little girl who liked to play in the park."}}
                                  .dump());
  CHECK(got["embeddings"].get<int>() >= 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("prompt '" << cases[i].prompt << "'");
    REQUIRE(cases[i].greedy_ids.size() == static_cast<size_t>(max_tokens));
    std::string text = got["texts"][i];
    std::string want = cases[i].greedy_text;
    text.erase(0, text.find_first_not_of(' '));
    want.erase(0, want.find_first_not_of(' '));
    CHECK(text == want);
  }
}

TEST_CASE("An embedding input longer than the context is refused with a 400 naming input", "[serve][embeddings]") {
  if (!serve_embeds()) LLMK_SKIP("embeddings are not served by a parallel job");
  ServeProcess serve(kServeArgs);
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  std::string text;
  for (int i = 0; i < 400; ++i) text += "Once upon a time. ";  // stories260K's context is 512 tokens
  const auto r = curl(serve.http_port(), "POST", "/v1/embeddings", json{{"input", text}}.dump());
  INFO(r.body);
  CHECK(r.status == 400);
  CHECK(r.json()["error"]["param"] == "input");
  CHECK(r.json()["error"]["message"].get<std::string>().find("more than the context of 512") != std::string::npos);
  // The server still answers afterwards, and a short input is served.
  const auto ok = curl(serve.http_port(), "POST", "/v1/embeddings", json{{"input", "Once upon a time"}}.dump());
  INFO(ok.body);
  CHECK(ok.status == 200);
  CHECK(ok.json()["data"][0]["embedding"].size() == 64);
}

TEST_CASE("An embedding input larger than the free KV memory gets a 503, and the server goes on", "[serve][embeddings]") {
  if (!serve_embeds()) LLMK_SKIP("embeddings are not served by a parallel job");
  // 256 KV slots (kv.paged: kv.contiguous wants a whole context): an input
  // of 300 tokens fits the context (512) but never the cache.
  std::vector<std::string> args = kServeArgs;
  args.insert(args.end(), {"--set", "kv_cache.capacity_tokens=256", "--set", "plugins.kv_allocator=kv.paged"});
  ServeProcess serve(args);
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  const json ids(std::vector<int32_t>(300, 42));
  const auto r = curl(serve.http_port(), "POST", "/v1/embeddings", json{{"input", ids}}.dump());
  INFO(r.body);
  CHECK(r.status == 503);
  CHECK(r.json()["error"]["message"].get<std::string>().find("no KV memory free") != std::string::npos);
  const auto ok = curl(serve.http_port(), "POST", "/v1/embeddings", json{{"input", "Once upon a time"}}.dump());
  INFO(ok.body);
  CHECK(ok.status == 200);
  const auto gen = curl(serve.http_port(), "POST", "/v1/completions",
                        json{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}.dump());
  CHECK(gen.status == 200);
}

TEST_CASE("ZeroMQ embed messages give the float64 reference's vectors, counted in /metrics", "[serve][embeddings]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with NumPy (scripts/setup.sh makes it)");
  if (!serve_embeds()) LLMK_SKIP("embeddings are not served by a parallel job");
  const auto cases = text_cases();
  json ids = json::array();
  for (const auto& c : cases) ids.push_back(c.input_ids);
  const json ref = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/core/embedding_reference.py embed " +
                                  test::stories_dir(),
                              json{{"inputs", ids}}.dump());
  ServeProcess serve(kServeArgs);
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  test::RawPeer peer(serve.zmq_endpoint());
  peer.send_json({{"v", 1}, {"type", "embed"}, {"id", "e"}, {"input", ids}});
  const json got = peer.recv_json(std::chrono::seconds(60));
  INFO(got.dump().substr(0, 400));
  REQUIRE(got["type"] == "embedding");
  CHECK(got["id"] == "e");
  REQUIRE(got["data"].size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("input '" << cases[i].prompt << "'");
    CHECK(rel_l2(got["data"][i]["embedding"], ref["embeddings"][i]["last_unit"]) < kTolerance);
  }
  // A bad one names its field, and the connection is still served.
  peer.send_json({{"v", 1}, {"type", "embed"}, {"id", "bad"}, {"input", "x"}, {"dimensions", 65}});
  const json bad = peer.recv_json(std::chrono::seconds(30));
  INFO(bad.dump());
  CHECK(bad["type"] == "error");
  CHECK(bad["param"] == "dimensions");
  peer.send_json({{"v", 1}, {"type", "embed"}, {"id", "mean"}, {"input", json::array({ids[0]})}, {"pooling", "mean"},
                  {"dimensions", 16}});
  const json mean = peer.recv_json(std::chrono::seconds(60));
  REQUIRE(mean["type"] == "embedding");
  CHECK(rel_l2(mean["data"][0]["embedding"], ref["embeddings"][0]["mean_unit_dims"]) < kTolerance);
  const auto http = curl(serve.http_port(), "POST", "/v1/embeddings", json{{"input", json::array({ids[0]})}}.dump());
  CHECK(http.status == 200);
  // Counted per front end: two embeds answered over ZeroMQ (the bad one is a
  // rejection), one over HTTP; inputs and their tokens likewise.
  const auto metrics = curl(serve.http_port(), "GET", "/metrics", "");
  INFO(metrics.body);
  // A sample's value: the line NAME{frontend="F",...} VALUE (the server adds its replica label).
  const auto value = [&](const std::string& name, const std::string& frontend) -> double {
    const std::string start = name + "{frontend=\"" + frontend + "\"";
    const size_t at = metrics.body.find(start);
    if (at == std::string::npos) return -1;
    const size_t eol = metrics.body.find('\n', at);
    const std::string line = metrics.body.substr(at, eol - at);
    return std::stod(line.substr(line.rfind(' ') + 1));
  };
  CHECK(value("llmk_embedding_requests_total", "zmq") == 2);
  CHECK(value("llmk_embedding_inputs_total", "zmq") == static_cast<double>(cases.size() + 1));
  CHECK(value("llmk_embedding_requests_total", "http") == 1);
  CHECK(value("llmk_embedding_prompt_tokens_total", "http") == static_cast<double>(cases[0].input_ids.size()));
}

#endif  // LLMK_HAVE_ENGINE
