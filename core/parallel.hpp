// Tensor and pipeline parallelism across processes: where a process sits in
// a job of parallel.tensor x parallel.pipeline ranks (an mpirun launch), its
// communicators, and its share of the model.
//
// World rank r is tensor rank r % tensor of pipeline stage r / tensor. A
// stage's ranks form its tensor group (all-reduces after o_proj and
// down_proj, the gather of the logits); hidden states go from each rank to
// the rank of the same tensor rank in the next stage. Rank 0 runs the
// front ends, the actors and the scheduler; every rank runs every step
// (core/parallel_executor.hpp).
//
// The split is Megatron's: q/k/v and gate/up by output columns, o_proj and
// down_proj by input rows, the embedding and lm_head by vocabulary rows.
// Query heads divide evenly among the tensor ranks; KV heads too, or, when
// the degree exceeds them, each rank holds the one KV head its query heads
// read (replicated on degree / num_kv_heads ranks).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/communicator.hpp"
#include "core/config.hpp"
#include "core/model_config.hpp"
#include "core/plugin_loader.hpp"

namespace llmk {

// A rank's share of the layers' weights under tensor parallelism.
struct TensorShard {
  int32_t degree = 1, rank = 0;
  int32_t q_heads = 0, q_head_first = 0;    // query heads here, and the first one's index in the model
  int32_t kv_heads = 0, kv_head_first = 0;  // KV heads here (1 when replicated)
  int64_t inter_first = 0, inter_count = 0; // MLP columns here
  // Vocabulary rows of the embedding and lm_head: [vocab_first, vocab_first + vocab_count);
  // every rank's share but the last is vocab_chunk = ceil(vocab / degree).
  int64_t vocab_first = 0, vocab_count = 0, vocab_chunk = 0;
};

// Rank `rank`'s share at degree `degree`. Throws Error(invalid_config)
// naming the shape a degree cannot divide ("parallel.tensor 3 does not
// divide the 8 attention heads of ...").
TensorShard tensor_shard(const ModelConfig& model, int32_t degree, int32_t rank);

// The layers of pipeline stage `stage` of `stages`: [first, last). The
// stages share the work evenly, counting the lm_head (which the last stage
// runs) as the layers its weights weigh: with steps in flight, the slowest
// stage sets the pace. Each stage has at least one layer; throws
// Error(invalid_config) when the stages outnumber the layers.
struct StageLayers {
  int32_t first = 0, last = 0;
  int32_t count() const { return last - first; }
};
StageLayers stage_layers(const ModelConfig& model, int32_t stages, int32_t stage);

// What one rank holds of the model: its tensor shard and its stage's layers.
struct ModelShard {
  TensorShard tensor;
  int32_t stage = 0, stages = 1;
  StageLayers layers;
  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == stages - 1; }
  bool whole() const { return tensor.degree == 1 && stages == 1; }
};
ModelShard model_shard(const ModelConfig& model, int32_t tensor, int32_t pipeline, int32_t world_rank);

// The model as rank `shard` sees it: query and KV heads, MLP width and
// layers reduced to its share (attention plugins, KV memory and weight
// loading size themselves from it); vocabulary and head_dim unchanged.
ModelConfig local_model_config(const ModelConfig& model, const ModelShard& shard);

// This process's place in the job and its communicators.
class ParallelJob {
 public:
  // Joins the world of parallel.comm (loads the plugin, which starts the
  // transport), checks it has tensor x pipeline ranks, and splits the
  // tensor groups. The world carries host buffers (rank 0's announcements):
  // when parallel.comm serves devices only (comm.nccl), the job joins its
  // world first, on executor.device, for the executor's collectives, and
  // comm.mpi's for the host. Throws Error(invalid_config) when the launch does not
  // match the config ("parallel.tensor x parallel.pipeline = 4 ranks, the
  // job has 2: start it with mpirun -np 4").
  static std::shared_ptr<ParallelJob> join(const EngineConfig& cfg, PluginRegistry& plugins);
  // The job this process joined (one per process, as MPI has one world), or null.
  static std::shared_ptr<ParallelJob> current();
  // Forgets the process's job (its communicators go when the last holder lets go).
  static void leave();

  int32_t rank() const { return world_->rank(); }
  int32_t size() const { return world_->size(); }
  int32_t tensor() const { return tensor_; }
  int32_t pipeline() const { return pipeline_; }
  int32_t stage() const { return rank() / tensor_; }
  int32_t tensor_rank() const { return rank() % tensor_; }
  // World rank of tensor rank t of stage s.
  int32_t world_rank(int32_t stage, int32_t tensor_rank) const { return stage * tensor_ + tensor_rank; }
  Communicator& world() { return *world_; }
  Communicator& tensor_group() { return *tensor_group_; }
  // The tensor group on the device's buffers and queue when parallel.comm
  // is a device communicator (comm.nccl); null when it moves host buffers
  // (then world() and tensor_group() are parallel.comm's).
  Communicator* device_tensor_group() { return device_tensor_group_.get(); }
  // "rank 1 of 4 (stage 0 of 2, tensor rank 1 of 2), comm.mpi"
  std::string describe() const;

  // The job cannot go on (a peer was lost, or the ranks fell out of step):
  // the first reason is kept; programs poll failed() and end the job.
  void fail(const std::string& why);
  bool failed() const { return failed_.load(); }
  std::string failure() const;
  // Ends every rank of the job with `code` (the communicator's abort).
  [[noreturn]] void abort_job(int32_t code) { world_->abort(code); }

 private:
  ParallelJob() = default;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  std::string failure_;
  int32_t tensor_ = 1, pipeline_ = 1;
  // Declared first, destroyed last: the device communicator may own the
  // MPI session the host one runs on.
  std::shared_ptr<Communicator> device_world_;
  std::shared_ptr<Communicator> device_tensor_group_;
  std::shared_ptr<Communicator> world_;
  std::shared_ptr<Communicator> tensor_group_;
};

// How many ranks the launcher started this process among (Open MPI, MPICH,
// Slurm, PMIx environments); 1 when started alone.
int32_t launched_ranks();

// Copies of checkpoint tensors cut to a rank's share, kept as long as the
// weights borrow them. Rows are contiguous in every dtype (ggml blocks
// included) and are borrowed from the checkpoint; a column range is copied,
// and for ggml blocks must start and end on block boundaries.
class TensorSlices {
 public:
  // Rows [first, first + count) of t (a view into t's memory).
  const TensorView& rows(const TensorView& t, int64_t first, int64_t count);
  // Columns [first, first + count) of every row of t (a copy). Throws
  // Error(invalid_config) naming the tensor when the range cuts a block.
  const TensorView& columns(const TensorView& t, int64_t first, int64_t count);

 private:
  std::vector<std::unique_ptr<TensorView>> views_;
  std::vector<std::vector<uint8_t>> copies_;
};

}  // namespace llmk
