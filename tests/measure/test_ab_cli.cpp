// `llmk ab` end to end on stories260K: two configurations that differ only
// in the KV allocator must give identical greedy outputs on an identical
// workload, and the HTML report must render.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "render_check.hpp"
#include "support/skip.hpp"

using namespace llmk::test;
namespace fs = std::filesystem;

#ifdef LLMK_BENCH_HAVE_ENGINE

TEST_CASE("llmk ab reports identical greedy outputs for kv.contiguous and kv.paged", "[ab]") {
  const fs::path dir = fs::temp_directory_path() / ("llmk_ab_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "contiguous.yaml") << "plugins:\n  kv_allocator: kv.contiguous\n";
  std::ofstream(dir / "paged.yaml") << "plugins:\n  kv_allocator: kv.paged\n";
  const std::string cmd = std::string(LLMK_BINARY_DIR) + "/bin/llmk ab " + (dir / "contiguous.yaml").string() + " " +
                          (dir / "paged.yaml").string() + " --model " LLMK_SHARED_DIR "/models/stories260K" +
                          " --threads 1 --set kv_cache.capacity_tokens=4096 --set scheduler.max_num_seqs=16" +
                          " -n 24 --input-len 8:96 --output-len 8:64 --seed 3 --warmup 2 --no-progress" +
                          " --json " + (dir / "ab.json").string() + " --report " + (dir / "ab.html").string() + " 2>&1";
  const std::string out = run_capture(cmd + "; echo \"exit=$?\"");
  INFO(out);
  REQUIRE(out.find("exit=0") != std::string::npos);
  CHECK(out.find("greedy outputs identical: paged = contiguous on all 24 requests") != std::string::npos);

  std::ifstream in(dir / "ab.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j["contenders"].size() == 2);
  // Every request ran to its exact length in both (ignore_eos).
  uint64_t expected_tokens = 0;
  for (const auto& c : j["contenders"]) {
    CHECK(c["result"]["num_ok"] == 24);
    CHECK(c["result"]["num_errors"] == 0);
    uint64_t n = 0;
    for (const auto& r : c["result"]["requests"]) {
      CHECK(r["finish_reason"] == "length");
      n += r["output_tokens"].get<uint64_t>();
    }
    CHECK(n == c["result"]["num_output_tokens"].get<uint64_t>());
    expected_tokens = n;
  }
  const auto& d = j["output_diffs"][0];
  CHECK(d["identical"] == true);
  CHECK(d["num_requests_compared"] == 24);
  CHECK(d["num_tokens_compared"].get<uint64_t>() == expected_tokens);
  CHECK(d["num_tokens_differing"] == 0);

  // The report is html_report()'s, whose rendering test_report checks in
  // Chromium; here it must name both contenders and the verdict.
  std::ifstream report(dir / "ab.html");
  const std::string html((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("kv.paged") != std::string::npos);
  CHECK(html.find("greedy outputs identical") != std::string::npos);
  fs::remove_all(dir);
}

#else

TEST_CASE("llmk ab reports identical greedy outputs for kv.contiguous and kv.paged", "[ab]") {
  LLMK_SKIP("this build has no llmk_actors: llmk ab is not built");
}

#endif
