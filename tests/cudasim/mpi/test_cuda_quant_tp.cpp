// The CUDA quantized linear plugins at tensor degree 2 under the simulation,
// started by mpirun -np 2, one plugin per launch (the first argument:
// linear.cuda_int8, linear.cuda_int4 or linear.cuda_fp8). Rank 0 runs the
// CUDA executor behind a ParallelExecutor over comm.nccl's simulated twin
// (decode steps replayed from graphs), rank 1 serves its steps.
//
// The model: dummy weights (make_dummy_checkpoint) of a small Llama whose
// every shape divides at tensor 2 and holds linear.cuda_int4's default
// groups of 128 in every rank's slice: hidden 256 (o_proj: 128 input columns
// per rank), MLP 512 (down_proj: 256), 4 heads, 2 KV heads, an untied
// lm_head over 384 ids (192 rows per rank). stories260K (MLP 172: 86 input
// columns per rank) serves the refusal.
//
// What each plugin is held to, its prompts prefilled as one step and then
// greedy decode steps, against degree 1 of the same plugin on the same
// tokens (the tensor-parallel run's greedy ids):
//   - linear.cuda_int4 quantizes weights only, in groups along the input:
//     the rows a rank holds are degree 1's rows and its input columns start
//     and end on group boundaries, so every rank fits exactly degree 1's
//     groups and holds the same int4 weights; activations stay f32 (decode)
//     or are rounded to bf16 element by element (prefill) as at degree 1.
//     Only the order of the f32 sums differs (partial products, then the
//     all-reduce): the F32 tolerance, 1e-4 relative L2, as dense.
//   - linear.cuda_int8 (per-channel weight scales, per-token activation
//     scales) and linear.cuda_fp8 (E4M3, the same scales by default) scale
//     o_proj's and down_proj's input slices by their own maxima, which are
//     at most degree 1's: each rank rounds its slice at least as finely. So
//     tensor 2 rounds differently from degree 1 but no worse: its logits are
//     held to degree 1's error against F32 (linear.cublas in f32 at degree
//     1), 1.5 x + 1e-4, as the CPU plugins are (tests/parallel).
//   - greedy ids equal to degree 1's; a differing id only where degree 1's
//     two best logits are closer than the two runs differ (printed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/device_registry.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"
#include "core/parallel.hpp"
#include "core/parallel_executor.hpp"
#include "core/plugin_loader.hpp"
#include "cuda_tp_steps.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;
using test::cuda_tp::Run;

constexpr double kF32Tolerance = 1e-4;
constexpr int32_t kDecodeSteps = 6;

std::string plugin = "linear.cuda_int4";

EngineConfig config(const std::string& linear, bool parallel) {
  EngineConfig cfg;
  cfg.executor.device = "cuda";
  cfg.kv_cache.capacity_tokens = 1024;
  cfg.kv_cache.max_seq_len = 256;
  cfg.scheduler.max_num_batched_tokens = 256;
  cfg.plugins.linear = linear;
  cfg.plugins.linear_options = linear == "linear.cublas" ? R"({"dtype":"f32"})" : "{}";
  cfg.plugins.attention = "attention.cuda";
  if (parallel) {
    cfg.parallel.tensor = 2;
    cfg.parallel.comm = "comm.nccl";
    cfg.parallel.timeout_s = 300;  // simulated GPUs on two shared cores are slow peers
  }
  return cfg;
}

PluginRegistry& plugins() {
  static PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  return registry;
}

// Every rank builds the same weights: they depend on the seed and shapes only.
std::shared_ptr<const Checkpoint> small_llama() {
  static std::shared_ptr<const Checkpoint> checkpoint = [] {
    ModelConfig c;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.vocab_size = 384;
    c.max_position_embeddings = 256;
    c.tie_word_embeddings = false;  // lm_head a projection: logits O(1), few near-ties
    return std::shared_ptr<const Checkpoint>(make_dummy_checkpoint(c, 11, default_tokenizer_path()));
  }();
  return checkpoint;
}

// Five prompts of 5 to 17 tokens: 55 rows, above the decode kernels' row limits.
std::vector<std::vector<int32_t>> prompts(int32_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int32_t s = 0; s < 5; ++s) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < 5 + 3 * s; ++i) p.push_back(1 + (i * 977 + s * 131) % (vocab - 1));
    out.push_back(p);
  }
  return out;
}

double top2_gap(const float* row, int32_t n) {
  std::vector<float> sorted(row, row + n);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  return (sorted[0] - sorted[1]) / std::max(1e-30, static_cast<double>(std::abs(sorted[0])));
}

double rel_l2(const float* got, const float* want, int32_t n) {
  return test::rel_l2(got, std::vector<double>(want, want + n));
}

// Rank 0: tensor 2 with the plugin, then degree 1 with it and in F32, all
// fed the tensor-parallel run's tokens.
void check_against_degree_1(const std::shared_ptr<ParallelJob>& job) {
  const EngineConfig cfg = config(plugin, true);
  const auto checkpoint = small_llama();
  const int32_t vocab = checkpoint->config().vocab_size;
  Run parallel;
  {
    ParallelExecutor executor(make_cuda_shard_executor(cfg, checkpoint, plugins(), job), job, cfg.parallel.timeout_s);
    INFO(executor.describe());
    CHECK(executor.describe().find(plugin) != std::string::npos);
    parallel = test::cuda_tp::generate(executor, prompts(vocab), kDecodeSteps, nullptr);
  }  // the ParallelExecutor stops rank 1
  const auto one = make_cuda_executor(config(plugin, false), checkpoint, plugins());
  const Run base = test::cuda_tp::generate(*one, prompts(vocab), kDecodeSteps, &parallel);
  const auto exact_executor = make_cuda_executor(config("linear.cublas", false), checkpoint, plugins());
  const Run exact = test::cuda_tp::generate(*exact_executor, prompts(vocab), kDecodeSteps, &parallel);

  double apart = 0, err_par = 0, err_one = 0;
  int32_t flips = 0;
  for (size_t step = 0; step < parallel.logits.size(); ++step) {
    for (size_t s = 0; s < parallel.tokens.size(); ++s) {
      const float* got = parallel.logits[step].data() + s * vocab;
      const float* want = base.logits[step].data() + s * vocab;
      const float* f32 = exact.logits[step].data() + s * vocab;
      const double diff = rel_l2(got, want, vocab);
      apart = std::max(apart, diff);
      err_par = std::max(err_par, rel_l2(got, f32, vocab));
      err_one = std::max(err_one, rel_l2(want, f32, vocab));
      const int32_t id = test::argmax(got, vocab), want_id = test::argmax(want, vocab);
      if (id == want_id) continue;
      const double gap = top2_gap(want, vocab);
      std::printf("%s: greedy flip at step %zu, sequence %zu: tensor 2 picks %d, degree 1 %d; degree 1's top-2 gap "
                  "%.3g relative, the runs differ by %.3g\n",
                  plugin.c_str(), step, s, id, want_id, gap, diff);
      CHECK(gap < diff);
      ++flips;
    }
  }
  std::printf("%s at tensor 2 over %zu steps of %zu sequences: logits vs degree 1 %.2e; vs F32 %.2e (degree 1: "
              "%.2e); %d greedy flips\n",
              plugin.c_str(), parallel.logits.size(), parallel.tokens.size(), apart, err_par, err_one, flips);
  if (plugin == "linear.cuda_int4") {
    CHECK(apart < kF32Tolerance);
  } else {
    CHECK(err_par <= 1.5 * err_one + 1e-4);
  }
  CHECK(err_one > 0);  // the plugin did quantize: else the comparison above proves nothing
}

}  // namespace

TEST_CASE("a CUDA quantized linear plugin shards its weights at tensor 2: degree 1's logits within the plugin's "
          "tolerance and its greedy ids",
          "[quantized][tensor]") {
  spdlog::set_level(spdlog::level::warn);
  register_device_backend(Device::cuda,
                          DeviceBackend{&make_cuda_executor, &make_cuda_sampler, &make_cuda_shard_executor});
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(config(plugin, true), plugins());
  if (job->rank() == 0) {
    check_against_degree_1(job);
  } else {
    CHECK(serve_parallel_steps(config(plugin, true), small_llama(), plugins(), job) == 0);
  }
  ParallelJob::leave();
}

TEST_CASE("a degree whose slices cut a CUDA plugin's groups is refused at load on every rank, naming the shape "
          "and the plugin",
          "[quantized][refusal]") {
  // stories260K at tensor 2: o_proj gives each rank 32 input columns (groups
  // of 32 fit), down_proj 86 of its 172, which no group of 32 divides.
  EngineConfig cfg = config("linear.cuda_int4", true);
  cfg.plugins.linear_options = R"({"group_size":32})";
  const auto stories = std::shared_ptr<const Checkpoint>(load_checkpoint(test::stories_dir()));
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(cfg, plugins());
  try {
    make_cuda_shard_executor(cfg, stories, plugins(), job);
    FAIL("groups of 32 over 86-column slices were accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_config);
    CHECK_THAT(e.what(), Catch::Contains("parallel.tensor 2 gives each rank 86 input columns of "
                                         "model.layers.0.mlp.down_proj.weight [64 x 172], which linear.cuda_int4's "
                                         "groups of 32 do not divide"));
  }
  ParallelJob::leave();
}

int main(int argc, char** argv) {
  // mpirun ... test_cuda_quant_tp linear.cuda_int8|linear.cuda_int4|linear.cuda_fp8 [Catch2 arguments]
  // (one test case per launch: a process joins one job)
  if (argc > 1 && argv[1][0] != '-' && argv[1][0] != '[' && argv[1][0] != '~') {
    plugin = argv[1];
    argv[1] = argv[0];
    ++argv;
    --argc;
  }
  return Catch::Session().run(argc, argv);
}
