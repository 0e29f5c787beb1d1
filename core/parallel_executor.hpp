// One control plane for a parallel job: rank 0 runs the front ends, the
// actors and the scheduler; its executor is a ParallelExecutor, which
// announces every call (a step's batch, a KV save or restore) to the other
// ranks before running it on its own shard, and every other rank runs
// serve_parallel_steps(), which receives those announcements and runs the
// same call on its shard. The forward itself does the data exchange (the
// tensor group's all-reduces, the stages' residual streams, the logits
// gathered and sent to rank 0: core/model.cpp).
//
// How announcements travel: rank 0 broadcasts each to its stage's tensor
// group, and every stage passes it on to the same tensor rank of the next
// stage. A step's announcement goes on just before the step's residual
// stream, once the stage has computed it; any other at once. So every stage
// sees the calls in rank 0's order and runs each after the ones before it,
// and no stage ever waits for a later stage's work before starting its own.
//
// Pipeline parallelism keeps up to parallel.pipeline steps in flight, one per
// stage (Executor::start_step): rank 0 computes stage 0 of step t while the
// later stages compute steps t-1, t-2, ...; it takes the last stage's logits
// of the oldest step just before handing step t on when the pipeline is full
// (so the stages' hand-overs never wait on each other in a circle), or when
// the scheduler has nothing else to start (finish_oldest). The scheduler
// keeps the steps in flight disjoint (Scheduler, max_steps_in_flight).
//
// Faults: when a peer dies or stops answering, the call that waits on it
// throws Error(peer_lost) naming it (parallel.timeout_s). The executor then
// marks the job failed: every later call fails at once with the same error
// (so requests are answered 503), and the program ends the job with a
// non-zero code (ParallelJob::fail, abort_job). While rank 0 has no work, it
// announces a keep-alive every timeout/3, so a lost worker is found even
// with no traffic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/executor.hpp"
#include "core/parallel.hpp"

namespace llmk {

class ParallelExecutor final : public Executor {
 public:
  // `local` is rank 0's share, built over the same job (make_shard_executor).
  ParallelExecutor(std::unique_ptr<Executor> local, std::shared_ptr<ParallelJob> job, double timeout_s);
  // Tells the other ranks to stop (they leave serve_parallel_steps).
  ~ParallelExecutor() override;

  Device device() const override { return local_->device(); }
  const ModelConfig& model_config() const override { return local_->model_config(); }
  const ModelRuntime& runtime() const override { return local_->runtime(); }
  using Executor::execute;
  LogitsView execute(const StepBatch& batch, const SampledIds& previous) override;
  // parallel.pipeline when above 1: see above.
  int32_t max_steps_in_flight() const override { return stages_; }
  std::optional<LogitsView> start_step(const StepBatch& batch) override;
  LogitsView finish_oldest() override;
  int32_t steps_in_flight() const override { return static_cast<int32_t>(pending_.size()); }
  // Pipelined, rank 0 receives each step's logits into one of
  // max_steps_in_flight() + 1 buffers, used in turn.
  int32_t views_kept() const override { return stages_ > 1 ? stages_ + 1 : local_->views_kept(); }
  bool argmax_rows(const LogitsView& view, std::span<int32_t> out) override { return local_->argmax_rows(view, out); }
  void copy_logits_to_host(const LogitsView& view, int32_t first_row, int32_t num_rows, float* out) override {
    local_->copy_logits_to_host(view, first_row, num_rows, out);  // rank 0's logits, on its device
  }
  size_t weight_bytes() const override { return local_->weight_bytes(); }
  size_t kv_cache_bytes() const override { return local_->kv_cache_bytes(); }
  // Every rank loads the same attention plugin; a step's tree_parents
  // travel with it.
  bool attends_token_trees() const override { return local_->attends_token_trees(); }
  std::string describe() const override;
  bool time_forwards(ForwardTimings* timings) override { return local_->time_forwards(timings); }
  // Every rank's share of the slots, concatenated in rank order.
  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override;
  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override;

 private:
  template <class Fn>
  auto guarded(Fn&& fn);
  void keep_alive();
  // Announces a call other than a step, with nothing in flight.
  void announce_call(uint64_t command, const std::vector<uint8_t>& payload);
  LogitsView receive_oldest();  // under the lock

  std::unique_ptr<Executor> local_;
  std::shared_ptr<ParallelJob> job_;
  double timeout_s_;
  int32_t stages_ = 1;
  // Pipelined: the steps started whose logits rank 0 has not taken, oldest
  // first (their logits rows), and the buffers the logits land in.
  std::deque<int32_t> pending_;
  std::vector<std::shared_ptr<std::vector<float>>> received_;
  size_t next_received_ = 0;
  StepBatch resolved_;  // a step with fed-back rows, their ids put in
  std::vector<int32_t> previous_ids_;  // the previous step's ids, on the host
  std::vector<uint8_t> message_;
  std::mutex mutex_;  // one announcement at a time (calls and keep-alives)
  std::condition_variable wake_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_call_;
  std::thread keeper_;
};

// On every rank but 0: builds this rank's share of the model over the job
// and runs what rank 0 announces until it stops the job. Returns 0 then;
// on a lost peer, logs the error and ends the job (non-zero).
int serve_parallel_steps(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                         PluginRegistry& plugins, std::shared_ptr<ParallelJob> job);

}  // namespace llmk
