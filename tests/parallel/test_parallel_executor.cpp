// ParallelExecutor's own bookkeeping, under mpirun -np 2 as a job of one
// tensor rank by two pipeline stages. Rank 0's share is a stand-in executor
// that records the stage hand-over it is given and fails its forward, as a
// kernel or plugin error would, before handing the step on; so nothing
// reaches rank 1, which only joins and leaves the job.
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/model_config.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"
#include "core/parallel_executor.hpp"
#include "core/plugin_loader.hpp"

namespace {

using namespace llmk;

// Stage 0 of stories260K's shape whose forward throws.
class FailingStage final : public Executor {
 public:
  FailingStage() {
    config_.hidden_size = 64;
    config_.intermediate_size = 172;
    config_.num_layers = 5;
    config_.num_heads = 8;
    config_.num_kv_heads = 4;
    config_.head_dim = 8;
    config_.vocab_size = 512;
    runtime_.num_kv_slots = 256;
    runtime_.max_seq_len = 256;
    runtime_.max_step_tokens = 64;
  }
  Device device() const override { return Device::cpu; }
  const ModelConfig& model_config() const override { return config_; }
  const ModelRuntime& runtime() const override { return runtime_; }
  using Executor::execute;
  LogitsView execute(const StepBatch& /*batch*/, const SampledIds& /*previous*/) override {
    throw Error(ErrorCode::internal, "stage 0's forward failed");
  }
  bool set_stage_handover(std::function<void(const float* rows, size_t count)> handover) override {
    handover_ = std::move(handover);
    return true;
  }
  size_t weight_bytes() const override { return 0; }
  size_t kv_cache_bytes() const override { return 0; }
  std::string describe() const override { return "a failing stage"; }
  std::vector<uint8_t> save_kv(const std::vector<int32_t>& /*slots*/) override { return {}; }
  void restore_kv(const std::vector<int32_t>& /*slots*/, const std::vector<uint8_t>& /*data*/) override {}

  bool holds_handover() const { return static_cast<bool>(handover_); }

 private:
  ModelConfig config_;
  ModelRuntime runtime_;
  std::function<void(const float*, size_t)> handover_;
};

PluginRegistry& plugins() {
  static PluginRegistry registry;
  return registry;
}

}  // namespace

TEST_CASE("a pipelined step that throws mid-step leaves no stage hand-over behind and fails the job", "[parallel]") {
  spdlog::set_level(spdlog::level::warn);
  EngineConfig cfg;
  cfg.parallel.pipeline = 2;
  cfg.parallel.comm = "comm.mpi";
  const std::shared_ptr<ParallelJob> job = ParallelJob::join(cfg, plugins());
  if (job->rank() == 0) {
    auto stage = std::make_unique<FailingStage>();
    const FailingStage& local = *stage;
    {
      ParallelExecutor executor(std::move(stage), job, /*timeout_s=*/0);
      StepBatch b;  // one token of one sequence
      b.block_size = 16;
      b.max_blocks_per_seq = 1;
      b.token_ids = {5};
      b.positions = {0};
      b.slot_mapping = {0};
      b.query_start = {0, 1};
      b.context_lens = {1};
      b.block_tables = {0};
      b.logits_rows = {0};
      try {
        executor.start_step(b);
        FAIL("the failing forward was not reported");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::peer_lost);
        CHECK_THAT(e.what(), Catch::Contains("stage 0's forward failed"));
      }
      CHECK_FALSE(local.holds_handover());
      CHECK(job->failed());
      CHECK(executor.steps_in_flight() == 0);
    }  // a failed job is ended by abort, not by a stop: nothing is sent to rank 1
  }
  ParallelJob::leave();
}
