// StreamingLLM on the simulated CUDA executor (kv_cache.window,
// sink_tokens): stories260K driven by the scheduler through kv.paged (whole
// blocks leave the table) and kv.contiguous (the rows move down: copies the
// executor applies), greedy, for a stream that passes both the window (rows evicted,
// cache positions behind text positions, the sinks scored with q_sink) and
// the context length (text positions past the rotary tables), against the
// CPU executor on the same schedule: the same tokens, and every step's
// logits within the CPU-vs-CUDA F32 tolerance of test_cuda_executor.cpp.
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("StreamingLLM on the simulated CUDA executor needs the simulated plugins", "[cuda_executor]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/executor.hpp"
#include "core/plugin_loader.hpp"
#include "core/scheduler.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;

// The relative L2 gate of the F32 CUDA executor against float64 (and so
// against the CPU executor) in test_cuda_executor.cpp.
constexpr double kF32Tolerance = 1e-4;

// What one stream produced: the sampled ids and every step's logits rows.
struct StreamRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per step: [num_logits, vocab]
  int32_t max_position = 0;                // the largest text position a step held
  int32_t max_evicted = 0;                 // rows the sequence had evicted at the end
};

// One request of `prompt` + `num_generated` tokens through `executor` with
// the config's window, greedy, plan by plan as the engine's actors run it.
StreamRun run_stream(Executor& executor, const EngineConfig& cfg, PluginRegistry& kv_plugins,
                     const std::string& allocator, const std::vector<int32_t>& prompt, int32_t num_generated) {
  const ModelRuntime& rt = executor.runtime();
  const int32_t vocab = executor.model_config().vocab_size;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, cfg.kv_cache.block_size,
                                    rt.max_seq_len, 0, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(kv_plugins.load(allocator, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerSection section;
  section.max_num_seqs = 2;
  section.max_num_batched_tokens = 16;  // the prompt takes two chunks
  SchedulerOptions options;
  options.stream = StreamWindow{int32_t(cfg.kv_cache.window), int32_t(cfg.kv_cache.sink_tokens),
                                int32_t(cfg.kv_cache.block_size)};
  Scheduler sched(section, SchedulerLimits{int32_t(rt.max_seq_len), {}, vocab}, kv, options);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = num_generated;
  greedy.ignore_eos = true;
  sched.add_request("s", prompt, greedy);

  StreamRun run;
  while (sched.has_work()) {
    StepPlan plan = sched.schedule();
    REQUIRE(plan.events.empty());
    REQUIRE_FALSE(plan.empty());
    const StepBatch& b = plan.batch;
    run.max_position = std::max(run.max_position, *std::max_element(b.positions.begin(), b.positions.end()));
    const LogitsView view = executor.execute(b);
    std::vector<float> rows(static_cast<size_t>(b.num_logits()) * vocab);
    if (b.num_logits() > 0) executor.copy_logits_to_host(view, 0, b.num_logits(), rows.data());
    std::vector<int32_t> sampled;
    for (int32_t r = 0; r < b.num_logits(); ++r) {
      const float* row = rows.data() + static_cast<size_t>(r) * vocab;
      sampled.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
    run.logits.push_back(std::move(rows));
    if (const Sequence* seq = sched.sequence(1)) run.max_evicted = seq->num_evicted_tokens;
    for (const TokenEvent& e : sched.update_from_output(plan, sampled)) {
      REQUIRE(e.error == "");
      if (e.token_id) run.tokens.push_back(*e.token_id);
    }
  }
  return run;
}

}  // namespace

TEST_CASE("StreamingLLM on the simulated CUDA executor: a stream past the window and the context gives the CPU "
          "executor's greedy tokens and logits",
          "[cuda_executor][stream]") {
  // Context 48, a window of 32 rows with 8 sinks, evicted 8 at a time: 84
  // tokens evict 48 rows and rotate the last ones at positions up to 83.
  const std::string allocator = GENERATE(as<std::string>{}, "kv.paged", "kv.contiguous");
  INFO(allocator);
  cudasim_test::reset_simulator(1);
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  EngineConfig cfg;
  cfg.executor.num_threads = 1;
  cfg.kv_cache.block_size = 8;
  cfg.kv_cache.max_seq_len = 48;
  cfg.kv_cache.capacity_tokens = 96;
  cfg.kv_cache.window = 32;
  cfg.kv_cache.sink_tokens = 8;
  cfg.kv_cache.enable_prefix_caching = false;
  cfg.scheduler.max_num_batched_tokens = 16;
  const std::vector<int32_t> prompt = test::golden_cases().back().input_ids;
  const int32_t num_generated = 84 - static_cast<int32_t>(prompt.size());
  REQUIRE(num_generated > 0);

  PluginRegistry cpu_plugins({LLMK_PLUGIN_BUILD_DIR});
  const std::unique_ptr<Executor> cpu = make_executor(cfg, checkpoint, cpu_plugins);
  const StreamRun want = run_stream(*cpu, cfg, cpu_plugins, allocator, prompt, num_generated);

  EngineConfig cuda_cfg = cfg;
  cuda_cfg.executor.device = "cuda";
  cuda_cfg.plugins.linear = "linear.cublas";
  cuda_cfg.plugins.attention = "attention.cuda";
  PluginRegistry cuda_plugins({LLMK_CUDASIM_PLUGIN_DIR});
  const std::unique_ptr<Executor> gpu = make_cuda_executor(cuda_cfg, checkpoint, cuda_plugins);
  const StreamRun got = run_stream(*gpu, cuda_cfg, cpu_plugins, allocator, prompt, num_generated);

  // The stream really shifted and passed the rotary tables.
  CHECK(want.max_position >= 48);
  CHECK(want.max_evicted >= 40);
  CHECK(got.tokens == want.tokens);
  REQUIRE(got.logits.size() == want.logits.size());
  const int32_t vocab = checkpoint->config().vocab_size;
  for (size_t step = 0; step < want.logits.size(); ++step) {
    REQUIRE(got.logits[step].size() == want.logits[step].size());
    for (size_t r = 0; r * vocab < want.logits[step].size(); ++r) {
      const std::vector<double> cpu_row(want.logits[step].begin() + r * vocab,
                                        want.logits[step].begin() + (r + 1) * vocab);
      const double err = test::rel_l2(got.logits[step].data() + r * vocab, cpu_row);
      INFO("step " << step << " row " << r << ": relative L2 error " << err << " against the CPU executor");
      CHECK(err < kF32Tolerance);
    }
  }
}
#endif
