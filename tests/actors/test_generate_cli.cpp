// `llmk generate` through the Engine: streamed text for one prompt, and a
// JSONL batch with a bad line, n > 1 and a stop string.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/executor.hpp"
#include "engine_fixture.hpp"
#include "support/command.hpp"
#include "support/skip.hpp"

using llmk::test::CommandResult;
using llmk::test::run_command;

namespace {

// Runs a shell command; returns its stdout and sets its exit status.
std::string run(const std::string& command, int& status) {
  CommandResult r = run_command(command);
  status = r.status;
  return std::move(r.out);
}

const std::string llmk_command = std::string(LLMK_BINARY_DIR) + "/bin/llmk --log-level warn generate --model " +
                                 LLMK_SHARED_DIR + "/models/stories260K --threads 1 --set kv_cache.capacity_tokens=8192";

}  // namespace

TEST_CASE("llmk generate streams only the generated text on stdout", "[cli]") {
  auto golden = llmk::test::load_golden();
  int status = 0;
  std::string out = run(llmk_command + " --prompt '' --temperature 0 --max-tokens 48 --ignore-eos 2>/dev/null", status);
  CHECK(status == 0);
  CHECK(out == golden[0].greedy_text);
}

TEST_CASE("llmk generate refuses a device it cannot serve, naming why", "[cli]") {
  int status = 0;
  const std::string out =
      run(llmk_command + " --prompt 'Once' --max-tokens 4 --set executor.device=cuda 2>&1", status);
  INFO(out);
  if (llmk::has_executor("cuda")) {
    // A build with the CUDA executor, on a machine with no GPU.
    if (status == 0) LLMK_SKIP("a CUDA device is present: scripts/gpu-check.sh tests the executor on it");
    CHECK(out.find("executor.device is cuda, but no CUDA device is visible") != std::string::npos);
    return;
  }
  CHECK(status != 0);
  CHECK(out.find("executor.device") != std::string::npos);
  CHECK(out.find("'cuda' has no executor in this build (built: cpu)") != std::string::npos);
}

TEST_CASE("llmk generate --batch-file answers every line, bad lines with an error result", "[cli]") {
  auto golden = llmk::test::load_golden();
  std::string path = std::string(LLMK_BINARY_DIR) + "/test_generate_batch.jsonl";
  {
    std::ofstream f(path);
    f << R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0})" << '\n';
    f << R"({"id": "bad", "prompt": 12})" << '\n';
    f << "not json\n";
    f << R"({"id": "n2", "prompt": "Tom had a red ball.", "max_tokens": 8, "temperature": 0.8, "seed": 5, "n": 2})"
      << '\n';
    f << R"({"id": "stop", "prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "stop": ["Lily"]})"
      << '\n';
    f << R"({"id": "neg", "prompt": "Once upon a time", "temperature": -1})" << '\n';
  }
  int status = 0;
  std::string out = run(llmk_command + " --ignore-eos --batch-file " + path + " 2>/dev/null", status);
  CHECK(status == 0);
  std::istringstream lines(out);
  std::vector<nlohmann::json> results;
  for (std::string line; std::getline(lines, line);) results.push_back(nlohmann::json::parse(line));
  REQUIRE(results.size() == 6);
  CHECK(results[0]["id"] == "a");
  CHECK(results[0]["token_ids"].get<std::vector<int32_t>>() == golden[1].greedy_ids);
  CHECK(results[0]["finish_reason"] == "length");
  CHECK(results[0]["usage"]["completion_tokens"] == 48);
  CHECK(results[0]["usage"]["prompt_tokens"] == 5);
  CHECK(results[0]["timings"]["e2e_s"].get<double>() > 0);
  CHECK(results[1]["id"] == "bad");
  CHECK(results[1]["finish_reason"] == "error");
  CHECK(results[2]["id"] == "line-3");
  CHECK(results[2]["finish_reason"] == "error");
  REQUIRE(results[3]["choices"].size() == 2);
  CHECK(results[3]["choices"][1]["index"] == 1);
  CHECK(results[3]["usage"]["completion_tokens"] == 16);
  CHECK(results[4]["finish_reason"] == "stop");
  std::string text = results[4]["text"];
  CHECK(text == results[0]["text"].get<std::string>().substr(0, results[0]["text"].get<std::string>().find("Lily")));
  CHECK(results[5]["finish_reason"] == "error");
  CHECK(results[5]["error"].get<std::string>().find("temperature") != std::string::npos);
}
