// The CUDA executor at tensor degree 2 under the simulation, started by
// mpirun -np 2: every rank runs core/cuda/ on a simulated GPU of its own,
// rank 0 behind a ParallelExecutor (as in production) and rank 1 in
// serve_parallel_steps. One program per transport (the first argument):
//   comm.nccl   the job's device tensor group (comm.nccl's simulated twin,
//               carried over MPI), on the executor's stream; decode steps
//               are replayed from CUDA graphs that hold the collectives
//   comm.mpi    the host tensor group, with host copies (no graphs)
//
// Rank 0 checks stories260K's five golden prompts, prefilled as one step,
// then kDecodeSteps greedy decode steps of the five together:
//   - the prompts' last logits within the CUDA executor's F32 golden
//     tolerance (1e-4 relative L2, tests/cudasim/test_cuda_executor.cpp) of
//     the float64 golden vectors;
//   - every step's logits within the same tolerance of the degree-1
//     simulated CUDA executor's, run afterwards on the same tokens (the
//     tensor-parallel run's greedy ids, so that a flip cannot make the
//     sequences diverge);
//   - the greedy ids equal to the degree-1 executor's, a differing id
//     allowed only at a near-tie of degree 1's two best logits (printed);
//   - the decode steps again with fed-back ids in device memory (as
//     scheduler.overlap plans them) give the same logits;
//   - a sequence's K/V saved from both ranks and restored elsewhere
//     decodes as the original.
// Tensor degree 2 splits stories260K's 8 query heads, 4 KV heads, MLP width
// 768 and 512-token vocabulary evenly.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
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
#include "core/parallel.hpp"
#include "core/parallel_executor.hpp"
#include "core/plugin_loader.hpp"
#include "cuda_tp_steps.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;
using test::cuda_tp::decode;
using test::cuda_tp::kSlotsPerSequence;
using test::cuda_tp::prefill;
using test::cuda_tp::run;

constexpr double kF32Tolerance = 1e-4;
// Two logits closer than this (relative to the larger) are a near-tie: f32
// sums in another order may pick either.
constexpr double kNearTie = 1e-4;
constexpr int32_t kDecodeSteps = 6;

std::string transport = "comm.nccl";

EngineConfig config(bool parallel) {
  EngineConfig cfg;
  cfg.executor.device = "cuda";
  cfg.kv_cache.capacity_tokens = 1024;
  cfg.scheduler.max_num_batched_tokens = 256;
  cfg.plugins.linear = "linear.cublas";
  cfg.plugins.linear_options = R"({"dtype":"f32"})";
  cfg.plugins.attention = "attention.cuda";
  if (parallel) {
    cfg.parallel.tensor = 2;
    cfg.parallel.comm = transport;
    cfg.parallel.timeout_s = 300;  // simulated GPUs on two shared cores are slow peers
  }
  return cfg;
}

PluginRegistry& plugins() {
  static PluginRegistry registry({LLMK_CUDASIM_PLUGIN_DIR});
  return registry;
}

std::shared_ptr<const Checkpoint> stories() {
  static std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  return checkpoint;
}

// The decode steps again as scheduler.overlap plans them: every token a
// fed-back row, the previous step's ids in device memory (where the CUDA
// sampler leaves them), which rank 0 copies to the host to announce the step.
std::vector<std::vector<float>> generate_overlapped(Executor& executor) {
  const int32_t vocab = executor.model_config().vocab_size;
  std::vector<std::vector<int32_t>> tokens;
  for (const test::GoldenCase& c : test::golden_cases()) tokens.push_back(c.input_ids);
  const auto n = static_cast<int32_t>(tokens.size());
  std::vector<std::vector<float>> logits = {run(executor, prefill(tokens))};
  void* ids = nullptr;
  REQUIRE(cudaMalloc(&ids, static_cast<size_t>(n) * sizeof(int32_t)) == cudaSuccess);
  for (int32_t step = 1; step <= kDecodeSteps; ++step) {
    std::vector<int32_t> sampled(static_cast<size_t>(n));
    for (int32_t s = 0; s < n; ++s) {
      sampled[static_cast<size_t>(s)] = test::argmax(logits.back().data() + static_cast<size_t>(s) * vocab, vocab);
      tokens[static_cast<size_t>(s)].push_back(sampled[static_cast<size_t>(s)]);
    }
    REQUIRE(cudaMemcpy(ids, sampled.data(), sampled.size() * sizeof(int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
    StepBatch b = decode(tokens);
    for (int32_t s = 0; s < n; ++s) {
      b.token_ids[static_cast<size_t>(s)] = 0;  // not known when the step was planned
      b.fed_back.push_back(FedBackToken{s, s});
    }
    SampledIds previous;
    previous.device = Device::cuda;
    previous.data = static_cast<const int32_t*>(ids);
    previous.count = n;
    logits.push_back(run(executor, b, previous));
  }
  cudaFree(ids);
  return logits;
}

std::vector<std::vector<int32_t>> golden_prompts() {
  std::vector<std::vector<int32_t>> tokens;
  for (const test::GoldenCase& c : test::golden_cases()) tokens.push_back(c.input_ids);
  return tokens;
}

// Offload preemption in the job: sequence 0's K/V saved (every rank's share)
// and restored into another slot range, then the same next token decoded in
// both places gives the same logits.
void check_kv_round_trip(Executor& executor, const std::vector<int32_t>& tokens) {
  const auto len = static_cast<int32_t>(tokens.size());  // positions holding K/V
  constexpr int32_t kOtherRange = 5 * kSlotsPerSequence;
  std::vector<int32_t> from(static_cast<size_t>(len)), to(static_cast<size_t>(len));
  for (int32_t p = 0; p < len; ++p) from[static_cast<size_t>(p)] = p, to[static_cast<size_t>(p)] = kOtherRange + p;
  executor.restore_kv(to, executor.save_kv(from));
  StepBatch b;
  b.block_size = kSlotsPerSequence;
  b.max_blocks_per_seq = 1;
  b.query_start = {0, 1, 2};
  b.token_ids = {tokens.back(), tokens.back()};
  b.positions = {len, len};
  b.slot_mapping = {len, kOtherRange + len};
  b.context_lens = {len + 1, len + 1};
  b.block_tables = {0, kOtherRange};
  b.logits_rows = {0, 1};
  const std::vector<float> logits = run(executor, b);
  const int32_t vocab = executor.model_config().vocab_size;
  const std::vector<double> original(logits.begin(), logits.begin() + vocab);
  const double err = test::rel_l2(logits.data() + vocab, original);
  INFO("restored K/V against the original, relative L2 " << err);
  CHECK(err < 1e-6);
}

// Rank 0: the tensor-parallel run, then degree 1 on the same tokens.
void check_against_degree_1(const std::shared_ptr<ParallelJob>& job) {
  const EngineConfig cfg = config(true);
  test::cuda_tp::Run parallel;
  {
    std::unique_ptr<Executor> local = make_cuda_shard_executor(cfg, stories(), plugins(), job);
    const Executor& shard = *local;
    ParallelExecutor executor(std::move(local), job, cfg.parallel.timeout_s);
    INFO(executor.describe());
    CHECK(executor.describe().find(transport) != std::string::npos);
    parallel = test::cuda_tp::generate(executor, golden_prompts(), kDecodeSteps, nullptr);
    const CudaGraphStats graphs = cuda_graph_stats(shard);
    INFO("graphs " << graphs.graphs << ", replays " << graphs.replays);
    // Decode steps of one bucket: the first captured, the others replayed
    // (collectives included) on the device transport; no graphs over host copies.
    if (transport == "comm.nccl") CHECK(graphs.replays == static_cast<size_t>(kDecodeSteps - 1));
    else CHECK(graphs.graphs == 0);
    const std::vector<std::vector<float>> overlapped = generate_overlapped(executor);
    for (size_t step = 0; step < overlapped.size(); ++step) {
      const std::vector<double> want(parallel.logits[step].begin(), parallel.logits[step].end());
      const double err = test::rel_l2(overlapped[step].data(), want);
      INFO("step " << step << ": overlapped (fed-back ids from the device) against announced ids, relative L2 "
                   << err);
      CHECK(err < 1e-6);
    }
    check_kv_round_trip(executor, parallel.tokens[0]);
  }  // the ParallelExecutor stops rank 1

  std::unique_ptr<Executor> whole = make_cuda_executor(config(false), stories(), plugins());
  const test::cuda_tp::Run reference = test::cuda_tp::generate(*whole, golden_prompts(), kDecodeSteps, &parallel);
  const int32_t vocab = whole->model_config().vocab_size;
  const auto& cases = test::golden_cases();
  for (size_t s = 0; s < cases.size(); ++s) {
    const double err = test::rel_l2(parallel.logits[0].data() + s * vocab, cases[s].last_logits);
    INFO("prompt " << s << ": tensor 2 against float64, relative L2 " << err);
    CHECK(err < kF32Tolerance);
  }
  int32_t flips = 0;
  for (size_t step = 0; step < parallel.logits.size(); ++step) {
    for (size_t s = 0; s < cases.size(); ++s) {
      const float* got = parallel.logits[step].data() + s * vocab;
      const float* want = reference.logits[step].data() + s * vocab;
      const std::vector<double> want64(want, want + vocab);
      const double err = test::rel_l2(got, want64);
      INFO("step " << step << ", sequence " << s << ": tensor 2 against degree 1, relative L2 " << err);
      CHECK(err < kF32Tolerance);
      const int32_t id = test::argmax(got, vocab), want_id = test::argmax(want, vocab);
      if (id == want_id) continue;
      // A flip only where degree 1's two best are a near-tie.
      std::vector<float> sorted(want, want + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const double gap = (sorted[0] - sorted[1]) / std::max(1e-30, static_cast<double>(std::abs(sorted[0])));
      std::printf("greedy flip at step %zu, sequence %zu: tensor 2 picks %d, degree 1 %d (their logits %.7g, %.7g; "
                  "degree 1's top-2 gap %.3g relative)\n",
                  step, s, id, want_id, want[id], want[want_id], gap);
      CHECK(gap < kNearTie);
      ++flips;
    }
  }
  std::printf("tensor 2 over %s: %d greedy flips in %zu steps of %zu sequences\n", transport.c_str(), flips,
              parallel.logits.size(), cases.size());
}

}  // namespace

TEST_CASE("the simulated CUDA executor at tensor 2 gives the degree-1 executor's logits and greedy ids on the "
          "golden prompts, and the float64 golden logits; overlapped steps and K/V saves give the same logits",
          "[cuda_executor][tensor]") {
  spdlog::set_level(spdlog::level::warn);
  register_device_backend(Device::cuda,
                          DeviceBackend{&make_cuda_executor, &make_cuda_sampler, &make_cuda_shard_executor});
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(config(true), plugins());
  if (job->rank() == 0) {
    check_against_degree_1(job);
  } else {
    CHECK(serve_parallel_steps(config(true), stories(), plugins(), job) == 0);
  }
  ParallelJob::leave();
}

TEST_CASE("the CUDA executor refuses pipeline stages on every rank, naming parallel.pipeline",
          "[cuda_executor][pipeline]") {
  // A job of one tensor rank by two stages; the refusal comes before any
  // collective, on each rank alike.
  EngineConfig cfg = config(true);
  cfg.parallel.tensor = 1;
  cfg.parallel.pipeline = 2;
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(cfg, plugins());
  CHECK_THROWS_WITH(make_cuda_shard_executor(cfg, stories(), plugins(), job),
                    Catch::Contains("parallel.pipeline 2") && Catch::Contains("tensor parallelism only"));
  ParallelJob::leave();
}

TEST_CASE("the CUDA executor refuses speculative decoding at tensor 2 on every rank, naming the keys",
          "[cuda_executor][speculation]") {
  // Verification steps across tensor ranks are not checked on this
  // executor: refused before any collective, on each rank alike.
  EngineConfig cfg = config(true);
  cfg.speculative.method = "ngram";
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(cfg, plugins());
  CHECK_THROWS_WITH(make_cuda_shard_executor(cfg, stories(), plugins(), job),
                    Catch::Contains("speculative.method 'ngram'") && Catch::Contains("parallel.tensor 2"));
  ParallelJob::leave();
}

int main(int argc, char** argv) {
  // mpirun ... test_cuda_executor_tp comm.nccl|comm.mpi [Catch2 arguments]
  // (one test case per launch: a process joins one job)
  if (argc > 1 && argv[1][0] != '-' && argv[1][0] != '[' && argv[1][0] != '~') {
    transport = argv[1];
    argv[1] = argv[0];
    ++argv;
    --argc;
  }
  return Catch::Session().run(argc, argv);
}
