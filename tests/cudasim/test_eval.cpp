// llmk eval's scoring (apps/eval/evaluator.hpp) over the CUDA executor under
// the simulation: the logits of every scored position come back through
// Executor::copy_logits_to_host, and stories260K's perplexity, KL and top-1
// against the CPU executor's saved run are those of two F32 engines.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("llmk eval on the simulated CUDA executor needs the simulated plugins", "[cuda_executor][eval]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <cmath>
#include <fstream>
#include <sstream>

#include "apps/eval/evaluator.hpp"
#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/plugin_loader.hpp"
#include "core/tokenizer.hpp"
#include "support/golden.hpp"

using namespace llmk;

namespace {

// Both engines compute in F32 (the CUDA one's logits within 1e-4 relative L2
// of the float64 reference, test_cuda_executor.cpp) and the errors average
// out over the scored tokens: measured 7e-8 relative, KL 8e-8.
constexpr double kPerplexityRelTolerance = 1e-6;
constexpr double kKlTolerance = 1e-5;

std::vector<int32_t> story_tokens() {
  std::ifstream in(std::string(LLMK_SOURCE_DIR) + "/tests/data/eval/story.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const Tokenizer tokenizer(std::filesystem::path(test::stories_dir()) / "tokenizer.model");
  return tokenizer.encode(ss.str(), true);
}

}  // namespace

TEST_CASE("llmk eval on the simulated CUDA executor scores stories260K as the CPU executor does",
          "[cuda_executor][eval]") {
  const std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  const std::vector<int32_t> tokens = story_tokens();
  eval::ChunkPlan plan = eval::plan_chunks(static_cast<int64_t>(tokens.size()), 128, 2, 1);
  eval::EvalRun run;
  run.tokens = tokens;
  run.plan = plan;
  run.batch = 64;  // two steps per chunk

  const std::filesystem::path base = std::filesystem::temp_directory_path() / "llmk_cudasim_eval_base.logits";
  EngineConfig cpu_cfg;
  cpu_cfg.executor.num_threads = 2;
  cpu_cfg.kv_cache.capacity_tokens = 128;
  cpu_cfg.scheduler.max_num_batched_tokens = 64;
  PluginRegistry cpu_plugins{{LLMK_PLUGIN_BUILD_DIR}};
  const std::unique_ptr<Executor> cpu = make_executor(cpu_cfg, checkpoint, cpu_plugins);
  const eval::RunIdentity identity = eval::make_identity(test::stories_dir(), checkpoint->config(), "story.txt", "cpu",
                                                         plan, tokens);
  eval::EvalResult on_cpu;
  {
    eval::LogitsWriter writer(base, identity);
    run.save = &writer;
    on_cpu = eval::evaluate(*cpu, run);
    run.save = nullptr;
  }

  cudasim_test::reset_simulator(1);
  EngineConfig cfg = cpu_cfg;
  cfg.executor.device = "cuda";
  cfg.plugins.linear = "linear.cublas";
  cfg.plugins.linear_options = R"({"dtype":"f32"})";
  cfg.plugins.attention = "attention.cuda";
  PluginRegistry plugins{{LLMK_CUDASIM_PLUGIN_DIR}};
  const std::unique_ptr<Executor> cuda = make_cuda_executor(cfg, checkpoint, plugins);
  eval::LogitsReader reader(base);
  run.base = &reader;
  const eval::EvalResult on_cuda = eval::evaluate(*cuda, run);
  std::filesystem::remove(base);

  INFO("CPU perplexity " << eval::perplexity(on_cpu.nll) << ", CUDA " << eval::perplexity(on_cuda.nll));
  REQUIRE(on_cuda.nll.count == 2 * 63);
  CHECK(eval::perplexity(on_cuda.nll) == Approx(eval::perplexity(on_cpu.nll)).epsilon(kPerplexityRelTolerance));
  CHECK(eval::perplexity(on_cuda.base_nll) == Approx(eval::perplexity(on_cpu.nll)).epsilon(1e-6));
  CHECK(std::abs(on_cuda.kl.mean()) < kKlTolerance);
  CHECK(on_cuda.top1_agreement() > 0.99);
}

#endif  // LLMK_CUDASIM_PLUGIN_DIR
