// An engine asked for the CUDA executor where there is no GPU: the build
// that compiled the CUDA executor says exactly that, and the CPU executor of
// the same build still serves.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "core/executor.hpp"
#include "engine_fixture.hpp"
#include "support/skip.hpp"

TEST_CASE("executor.device=cuda without a visible GPU fails with a clear reason, and the CPU engine serves",
          "[engine][cuda]") {
  using namespace llmk;
  if (!has_executor("cuda")) LLMK_SKIP("this build has no CUDA executor (LLMK_CUDA off or no nvcc)");
  EngineConfig cfg = test::stories_config();
  cfg.executor.device = "cuda";
  cfg.plugins.linear = "linear.cublas";
  cfg.plugins.attention = "attention.cuda";
  std::string message;
  try {
    Engine engine(cfg);
  } catch (const Error& e) {
    message = e.what();
  }
  if (message.empty()) LLMK_SKIP("a CUDA device is present: scripts/gpu-check.sh tests the executor on it");
  CHECK_THAT(message, Catch::Contains("no CUDA device is visible"));
  CHECK_THAT(message, Catch::Contains("executor.device=cpu"));

  Engine cpu(test::stories_config());
  const auto golden = test::load_golden();
  const auto r = test::run_one(cpu, test::golden_request(golden[0], "cpu-after-cuda"));
  CHECK(r.sample().token_ids == golden[0].greedy_ids);
}
