// The device seam. An Executor owns everything a forward touches on one
// device: the weights, the KV memory, the activations and the device's queue
// (the OpenMP team on the CPU, a stream on a CUDA device). The scheduler's
// StepBatch goes in; a LogitsView of logits that stay on the device comes
// out, and the sampler for that device reads them where they are.
//
//   scheduler ── StepBatch ──▶ Executor::execute ── LogitsView ──▶ sampler (same device)
//
// What is device-neutral stays out: the Scheduler, the KV allocator (slots
// and block tables only), the StepBatch layout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/forward_timings.hpp"
#include "core/kv_offloader.hpp"
#include "core/model_runtime.hpp"
#include "core/plugin_loader.hpp"
#include "core/step.hpp"

namespace llmk {

// When a view's logits may be read. The CPU executor fills them before
// execute() returns (event == nullptr). A CUDA executor records an event on
// its stream after the lm_head and puts the cudaEvent_t here; its sampler
// waits on it (on the GPU, with cudaStreamWaitEvent) before reading.
struct LogitsReady {
  void* event = nullptr;  // the device's event handle; nullptr: ready already
  bool is_ready_on_return() const { return event == nullptr; }
};

// One step's logits where the executor wrote them. Row i belongs to
// batch.logits_rows[i]. The memory is the executor's: it stays valid and
// unchanged for the executor's next Executor::views_kept() - 1 execute()
// calls (or until its destruction). The executor actor starts a step only
// once the sampler has taken the logits that step overwrites (read them on
// the host, or enqueued its reads on the device's queue ahead of it:
// actors/step_feedback.hpp), so a view is never overwritten while it is
// read.
struct LogitsView {
  Device device = Device::cpu;
  const float* data = nullptr;  // [num_rows, row_stride] f32 in `device` memory; first vocab_size of each row are used
  int32_t num_rows = 0;
  int32_t vocab_size = 0;
  int64_t row_stride = 0;       // floats from one row to the next (>= vocab_size)
  LogitsReady ready;
  // Keeps the memory behind `data` alive while the view is held, even past
  // the executor's own destruction (an engine shutting down destroys the
  // executor actor while the sampler may still read the last step). The
  // next-execute() rule above still governs when the contents may change.
  std::shared_ptr<const void> keep_alive;

  const float* row(int32_t i) const { return data + static_cast<int64_t>(i) * row_stride; }
};

// The ids the previous step sampled, for a step with fed-back rows
// (StepBatch::fed_back): where the sampler left them, on the executor's
// device. A CUDA sampler's ids are device memory, valid once `ready_event`
// (a cudaEvent_t) completes; the executor's stream waits for it, the host
// never does.
struct SampledIds {
  Device device = Device::cpu;
  const int32_t* data = nullptr;  // [count] in `device` memory
  int32_t count = 0;
  void* ready_event = nullptr;    // nullptr: valid now
  // The previous step sampled nothing (its forward or its sampling failed).
  // Its sequences are gone; their fed-back rows read token 0 and their
  // outputs are discarded.
  bool failed = false;
};

// What every executor checks of a step's fed-back rows (validate_step checks
// the rest): each row inside the step, and against the ids it was given: ids
// present (or the previous step failed), on `device`, every previous row
// among them. Throws Error(invalid_argument).
void validate_fed_back(const StepBatch& batch, const SampledIds& previous, Device device);

// What every executor checks before copy_logits_to_host: the view is in
// `device` memory and the rows lie inside it. Throws Error(invalid_argument).
void validate_logits_copy(const LogitsView& view, int32_t first_row, int32_t num_rows, Device device);

// save_kv / restore_kv (KvOffloader) copy sequences' K/V to and from host
// memory for offload preemption; they run only between steps (the scheduler
// calls them from schedule(), never while a step is in flight).
class Executor : public KvOffloader {
 public:
  ~Executor() override = default;

  virtual Device device() const = 0;
  virtual const ModelConfig& model_config() const = 0;
  // Threads, context limit, step size and the KV memory's size in slots
  // (from kv_cache.capacity_tokens, capacity_bytes or a fraction of memory).
  virtual const ModelRuntime& runtime() const = 0;

  // Runs one step's forward: applies batch.kv_copies, puts the previous
  // step's ids into batch.fed_back's rows, writes the new tokens' K/V, and
  // returns the logits of batch.logits_rows. Throws Error for a malformed
  // batch (fed-back rows without ids, ids of another device, a previous row
  // out of range) or a failing plugin; the previous view is invalid after
  // this call whatever happens.
  virtual LogitsView execute(const StepBatch& batch, const SampledIds& previous) = 0;
  // A step whose tokens are all known (no fed-back rows).
  LogitsView execute(const StepBatch& batch) { return execute(batch, SampledIds{}); }

  // How many of its latest views the executor keeps unchanged: 1, a view
  // lives until the next execute(); 2, until the one after, so step t's
  // logits may be sampled while step t+1 runs.
  virtual int32_t views_kept() const { return 1; }
  // Writes the greedy choice of each of `view`'s rows (greedy_token,
  // core/sampler.hpp: the same id the Sampler picks for a row whose params
  // choose the raw argmax) into out[0, view.num_rows), computed by the
  // executor's own threads. False where the executor has no such path (the
  // sampler then picks every id). `view` is its latest execute()'s.
  virtual bool argmax_rows(const LogitsView& /*view*/, std::span<int32_t> /*out*/) { return false; }
  // Embeddings (core/embedding.hpp): the same forward as execute() for a
  // prefill-only batch without fed-back rows, ending at the final RMSNorm:
  // hidden[batch.num_logits(), hidden_size] on the host, row i that of
  // batch.logits_rows[i]. The executor actor runs it between steps, never
  // beside one. Executors without it (a CUDA device, a parallel job) refuse
  // with Error(unsupported).
  virtual void embed_rows(const StepBatch& /*batch*/, float* /*hidden*/) {
    throw Error(ErrorCode::unsupported, "embeddings: this executor (" + describe() +
                                            ") does not compute hidden states; they are served with executor.device cpu");
  }
  // Medusa heads (core/medusa_proposer.hpp): the final-RMSNorm rows (what
  // lm_head read) of the latest execute()'s logits rows, copied to
  // hidden[num_rows, hidden_size] on the host, row i that of
  // batch.logits_rows[i]; num_rows is that step's num_logits(). False where
  // the executor keeps none (keeps_hidden_rows()).
  virtual bool copy_hidden_rows(int32_t /*num_rows*/, float* /*hidden*/) { return false; }
  virtual bool keeps_hidden_rows() const { return false; }
  // Copies rows [first_row, first_row + num_rows) of `view` (its latest
  // execute()'s) to host memory, out[num_rows, view.vocab_size], waiting
  // for them first: for programs that read whole distributions (llmk eval),
  // not for the serving path. The CPU's rows are host memory already; other
  // devices override it. Throws Error(invalid_argument) for rows outside the
  // view or a view of another device.
  virtual void copy_logits_to_host(const LogitsView& view, int32_t first_row, int32_t num_rows, float* out);
  // Copies a step's sampled ids (as execute() receives them) to host
  // memory, out[ids.count], waiting for them first: for a caller that needs
  // them there (a parallel job announces each step's token ids). The CPU's
  // are host memory already; other devices override it. Throws
  // Error(invalid_argument) for ids of another device.
  virtual void copy_ids_to_host(const SampledIds& ids, int32_t* out);

  // Steps in flight. An executor whose forward is a pipeline of stages
  // (parallel.pipeline > 1: core/parallel_executor.hpp) keeps up to
  // max_steps_in_flight() steps in it at once, one per stage, so no stage
  // idles while the host samples and plans; each step runs in two calls:
  //   start_step(batch) runs this rank's stage of the step and passes it
  //     on; when the pipeline is full it first takes the logits of the
  //     oldest step in flight, and returns them;
  //   finish_oldest() waits for the oldest step in flight and returns its
  //     logits (for when no next step is ready).
  // Logits come back in the order the steps started, each view valid until
  // views_kept() later views have been returned. Such steps carry no
  // fed-back rows. Every other executor has one step in flight: execute().
  virtual int32_t max_steps_in_flight() const { return 1; }
  virtual std::optional<LogitsView> start_step(const StepBatch& batch);
  virtual LogitsView finish_oldest();
  virtual int32_t steps_in_flight() const { return 0; }  // started, logits not yet returned
  // Pipeline parallelism, on a stage before the last: the residual stream
  // goes to `handover` instead of the next stage (Model::set_stage_handover).
  // False where the executor holds no such stage.
  virtual bool set_stage_handover(std::function<void(const float* rows, size_t count)> /*handover*/) {
    return false;
  }

  virtual size_t weight_bytes() const = 0;    // as the device holds them (quantized, packed)
  virtual size_t kv_cache_bytes() const = 0;  // KV memory reserved on the device
  // Whether its steps may carry token trees (StepBatch::tree_parents): its
  // attention plugin reads them (attention API 3.3). Where not, speculation
  // verifies chains of drafts.
  virtual bool attends_token_trees() const { return false; }
  // A line for logs: the device, threads or stream, the plugins chosen.
  virtual std::string describe() const = 0;
  // Later forwards add their operations' wall time to *timings (nullptr:
  // stop), for benchmarks; false where the executor cannot time them (its
  // operations run asynchronously on a device).
  virtual bool time_forwards(ForwardTimings* /*timings*/) { return false; }
};

// Builds the executor that cfg.executor.device names, through the device
// registry (core/device_registry.hpp). Throws Error(invalid_config) for a
// device with no executor in this build, naming the devices that are built;
// Error(internal) when the build has it but the program did not register it;
// otherwise what the executor's constructor throws (plugins that cannot
// load, weights it cannot use, no KV capacity, no device present). The
// checkpoint must outlive the executor.
std::unique_ptr<Executor> make_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                        PluginRegistry& plugins);

// This rank's share of the model in a parallel job, on cfg.executor.device
// (its registry entry's make_shard_executor). A collective call: every rank
// of the job builds its own at the same time. Throws Error(unsupported) for
// a device without tensor or pipeline parallelism.
class ParallelJob;
std::unique_ptr<Executor> make_shard_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                              PluginRegistry& plugins, std::shared_ptr<ParallelJob> job);

}  // namespace llmk
