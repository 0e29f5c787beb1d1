// `llmk plugins` lists what the loader finds, failures included.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "support/command.hpp"

using llmk::test::CommandResult;
using llmk::test::run_command;

namespace {

std::string run(const std::string& command) {
  CommandResult r = run_command(command);
  REQUIRE(r.status == 0);
  return std::move(r.out);
}

// The command line for `llmk plugins`, searching the fixture directory first.
std::string llmk_plugins(const std::string& flags) {
  return std::string("env -u LLMK_PLUGIN_PATH ") + LLMK_BINARY_DIR + "/bin/llmk plugins " + flags +
         " --plugin-dir " + LLMK_FIXTURE_PLUGIN_DIR;
}

}  // namespace

TEST_CASE("llmk plugins --json lists each plugin's info and each broken library's reason", "[cmd]") {
  const auto d = nlohmann::json::parse(run(llmk_plugins("--json")));
  REQUIRE(d["search_path"][0] == LLMK_FIXTURE_PLUGIN_DIR);
  std::map<std::string, nlohmann::json> by_name, by_file;
  for (const auto& p : d["plugins"]) {
    if (p.contains("name")) by_name[p["name"]] = p;
    by_file[p["file"].get<std::string>().substr(p["file"].get<std::string>().rfind('/') + 1)] = p;
  }
  REQUIRE(by_name.count("kv.vm"));
  CHECK(by_name["kv.vm"]["kind"] == "kv_allocator");
  CHECK(by_name["kv.vm"]["abi_version"] == 1);
  CHECK(by_name["kv.paged"]["capabilities"]["prefix_caching"] == true);
  CHECK(by_file["libllmk_kv_badabi.so"]["error"] == "ABI version 7, engine expects 1");
  REQUIRE(by_name.count("proposer.ngram"));
  CHECK(by_name["proposer.ngram"]["kind"] == "proposer");
  CHECK(by_name["proposer.ngram"]["api_version"] == "1.0");
}

TEST_CASE("llmk plugins prints a readable listing", "[cmd]") {
  const std::string out = run(llmk_plugins(""));
  CHECK_THAT(out, Catch::Contains("kv.paged (kv_allocator) 1.0.0"));
  CHECK_THAT(out, Catch::Contains("proposer.ngram (proposer) 1.0.0"));
  CHECK_THAT(out, Catch::Contains("libllmk_kv_nosymbol.so\n  error: no entry symbol"));
}

TEST_CASE("llmk plugins searches the configuration's plugin search path", "[cmd]") {
  const std::string cmd = std::string("env -u LLMK_PLUGIN_PATH ") + LLMK_BINARY_DIR +
                          "/bin/llmk plugins --json --set 'plugins.search_path=[" + LLMK_FIXTURE_PLUGIN_DIR + "]'";
  const auto d = nlohmann::json::parse(run(cmd));
  REQUIRE(d["search_path"][0] == LLMK_FIXTURE_PLUGIN_DIR);
  bool found_badabi = false;
  for (const auto& p : d["plugins"]) found_badabi |= p["file"].get<std::string>().ends_with("libllmk_kv_badabi.so");
  CHECK(found_badabi);
}

TEST_CASE("llmk plugins names the CPU, what each CPU level needs of it, and the level plugins load at", "[cmd]") {
  const auto d = nlohmann::json::parse(run(llmk_plugins("--json")));
  const auto& cpu = d["cpu"];
  REQUIRE(cpu["levels"].is_array());
  REQUIRE_FALSE(cpu["levels"].empty());
  const auto& baseline = cpu["levels"].back();
  CHECK(baseline["name"] == "baseline");
  CHECK(baseline["runs"] == true);  // this very process runs the baseline's code
  // The level taken is the first (highest) one that runs here.
  std::string first_runnable;
  for (const auto& l : cpu["levels"]) {
    if (l["runs"].get<bool>()) {
      first_runnable = l["name"];
      break;
    }
    CHECK_FALSE(l["lacks"].empty());  // a level that does not run says what is missing
  }
  CHECK(cpu["level"] == first_runnable);

  const std::string capped = run("env LLMK_CPU_ISA=baseline " + llmk_plugins(""));
  CHECK_THAT(capped, Catch::Contains("plugins load at level baseline (LLMK_CPU_ISA=baseline)"));
}