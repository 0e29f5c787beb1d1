// `llmk bench` inside a parallel job: mpirun starts the ranks, rank 0 runs
// the benchmark while the others serve its steps, and every rank exits 0.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"

using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

int count_of(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("llmk bench under mpirun at tensor 2: rank 0 measures, both ranks exit 0", "[cli][bench][parallel]") {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) LLMK_SKIP("mpirun is not installed");
  TempDir tmp;
  const fs::path llmk = fs::path(LLMK_BINARY_DIR) / "bin" / "llmk";
  const fs::path stories = fs::path(LLMK_SHARED_DIR) / "models" / "stories260K";
  const fs::path json_file = tmp.path() / "bench.json";
  const std::string cmd = "mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl_vader_single_copy_mechanism "
                          "none -np 2 '" + llmk.string() +
                          "' bench --model '" + stories.string() +
                          "' --set parallel.tensor=2 --set parallel.timeout_s=60 --threads 1 -n 4 --input-len 16"
                          " --output-len 32 --no-progress --json '" + json_file.string() + "' >'" +
                          (tmp.path() / "out").string() + "' 2>'" + (tmp.path() / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  const std::string out = read_file(tmp.path() / "out"), err = read_file(tmp.path() / "err");
  INFO(err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // mpirun's status: non-zero if any rank's was
  CHECK(count_of(out, "throughput") == 1);  // one table, rank 0's
  CHECK_THAT(err, Catch::Contains("rank 1 of 2") && Catch::Contains("serves rank 0's steps"));
  const auto j = nlohmann::json::parse(read_file(json_file));
  CHECK(j["num_ok"] == 4);
  CHECK(j["num_errors"] == 0);
  CHECK(j["num_output_tokens"] == 4 * 32);
}
