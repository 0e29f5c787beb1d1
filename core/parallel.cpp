#include "core/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/gguf_types.hpp"

namespace llmk {

namespace {

std::mutex job_mutex;
std::shared_ptr<ParallelJob> job_of_process;

std::string model_name(const ModelConfig& m) {
  return std::to_string(m.num_layers) + "-layer model (hidden " + std::to_string(m.hidden_size) + ")";
}

[[noreturn]] void refuse(const std::string& what) { throw Error(ErrorCode::invalid_config, what); }

}  // namespace

TensorShard tensor_shard(const ModelConfig& m, int32_t degree, int32_t rank) {
  TensorShard s;
  s.degree = degree;
  s.rank = rank;
  const std::string tp = "parallel.tensor " + std::to_string(degree);
  if (m.num_heads % degree != 0)
    refuse(tp + " does not divide the " + std::to_string(m.num_heads) + " attention heads of the " + model_name(m));
  s.q_heads = m.num_heads / degree;
  s.q_head_first = rank * s.q_heads;
  if (degree <= m.num_kv_heads) {
    if (m.num_kv_heads % degree != 0)
      refuse(tp + " does not divide the " + std::to_string(m.num_kv_heads) + " KV heads of the " + model_name(m));
    s.kv_heads = m.num_kv_heads / degree;
    s.kv_head_first = rank * s.kv_heads;
  } else {
    // More ranks than KV heads: each holds the one its query heads read.
    if (degree % m.num_kv_heads != 0)
      refuse(tp + " exceeds the " + std::to_string(m.num_kv_heads) + " KV heads of the " + model_name(m) +
             " without being a multiple of them (KV heads are replicated, not split)");
    s.kv_heads = 1;
    const int32_t group = m.num_heads / m.num_kv_heads;  // query heads per KV head
    s.kv_head_first = s.q_head_first / group;
  }
  if (m.intermediate_size % degree != 0)
    refuse(tp + " does not divide the MLP width " + std::to_string(m.intermediate_size) + " of the " + model_name(m));
  s.inter_count = m.intermediate_size / degree;
  s.inter_first = rank * s.inter_count;
  s.vocab_chunk = (static_cast<int64_t>(m.vocab_size) + degree - 1) / degree;
  s.vocab_first = std::min<int64_t>(m.vocab_size, rank * s.vocab_chunk);
  s.vocab_count = std::min<int64_t>(m.vocab_size, s.vocab_first + s.vocab_chunk) - s.vocab_first;
  if (s.vocab_count <= 0)
    refuse(tp + " leaves rank " + std::to_string(rank) + " no rows of the " + std::to_string(m.vocab_size) +
           "-token vocabulary");
  return s;
}

StageLayers stage_layers(const ModelConfig& m, int32_t stages, int32_t stage) {
  const int32_t layers = m.num_layers;
  if (stages > layers)
    refuse("parallel.pipeline " + std::to_string(stages) + " exceeds the model's " + std::to_string(layers) +
           " layers");
  // Work as weights read per token: a layer's projections, and the lm_head.
  const double h = m.hidden_size, q = static_cast<double>(m.num_heads) * m.head_dim,
               kv = static_cast<double>(m.num_kv_heads) * m.head_dim;
  const double layer = h * (q + 2 * kv) + q * h + 3 * h * m.intermediate_size;
  const double head = static_cast<double>(m.vocab_size) * h;
  const double share = (layers * layer + head) / stages;
  // Stage s ends at the layer boundary nearest s + 1 shares of the work,
  // leaving every stage before and after it at least one layer.
  auto end_of = [&](int32_t s) {
    if (s == stages - 1) return layers;
    const auto nearest = static_cast<int32_t>(std::lround(share * (s + 1) / layer));
    return std::clamp(nearest, s + 1, layers - (stages - 1 - s));
  };
  StageLayers l;
  l.first = 0;
  for (int32_t s = 0; s < stage; ++s) l.first = std::max(l.first + 1, end_of(s));
  l.last = std::max(l.first + 1, end_of(stage));
  return l;
}

ModelShard model_shard(const ModelConfig& model, int32_t tensor, int32_t pipeline, int32_t world_rank) {
  ModelShard s;
  s.tensor = tensor_shard(model, tensor, world_rank % tensor);
  s.stages = pipeline;
  s.stage = world_rank / tensor;
  s.layers = stage_layers(model, pipeline, s.stage);
  return s;
}

ModelConfig local_model_config(const ModelConfig& model, const ModelShard& shard) {
  ModelConfig local = model;
  local.num_heads = shard.tensor.q_heads;
  local.num_kv_heads = shard.tensor.kv_heads;
  local.intermediate_size = static_cast<int32_t>(shard.tensor.inter_count);
  local.num_layers = shard.layers.count();
  return local;
}

int32_t launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

std::shared_ptr<ParallelJob> ParallelJob::join(const EngineConfig& cfg, PluginRegistry& plugins) {
  std::lock_guard lock(job_mutex);
  if (job_of_process) return job_of_process;
  const auto& p = cfg.parallel;
  const int64_t wanted = static_cast<int64_t>(p.tensor) * p.pipeline;
  llmk_comm_desc desc = host_comm_desc(p.timeout_s, p.comm_options.c_str());
  std::shared_ptr<ParallelJob> job(new ParallelJob());
  job->tensor_ = static_cast<int32_t>(p.tensor);
  job->pipeline_ = static_cast<int32_t>(p.pipeline);
  Plugin comm = plugins.load(p.comm, LLMK_PLUGIN_COMM);
  if (!plugin_serves_device(comm.info(), "cpu")) {
    // Joined before comm.mpi: it initializes MPI at the thread level both need.
    llmk_comm_desc device_desc = desc;
    device_desc.device = cfg.executor.device == "cuda" ? LLMK_DEVICE_CUDA : LLMK_DEVICE_CPU;
    job->device_world_ = Communicator::world(comm, device_desc);
    desc.options = "{}";
    comm = plugins.load("comm.mpi", LLMK_PLUGIN_COMM);
  }
  job->world_ = Communicator::world(comm, desc);
  if (job->world_->size() != wanted)
    refuse("parallel.tensor x parallel.pipeline = " + std::to_string(p.tensor) + " x " + std::to_string(p.pipeline) +
           " = " + std::to_string(wanted) + " ranks, but the job has " + std::to_string(job->world_->size()) +
           ": start it with mpirun -np " + std::to_string(wanted));
  job->tensor_group_ = job->world_->split(job->stage(), job->tensor_rank());
  if (job->device_world_) job->device_tensor_group_ = job->device_world_->split(job->stage(), job->tensor_rank());
  spdlog::info("parallel: {}", job->describe());
  job_of_process = job;
  return job;
}

std::shared_ptr<ParallelJob> ParallelJob::current() {
  std::lock_guard lock(job_mutex);
  return job_of_process;
}

void ParallelJob::leave() {
  std::lock_guard lock(job_mutex);
  job_of_process.reset();
}

std::string ParallelJob::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " (stage " + std::to_string(stage()) +
         " of " + std::to_string(pipeline_) + ", tensor rank " + std::to_string(tensor_rank()) + " of " +
         std::to_string(tensor_) + "), " + world_->info().name +
         (device_world_ ? " + " + device_world_->info().name : std::string());
}

void ParallelJob::fail(const std::string& why) {
  std::lock_guard lock(failure_mutex_);
  if (failed_.exchange(true)) return;
  failure_ = why;
  spdlog::error("parallel job failed ({}): {}", describe(), why);
}

std::string ParallelJob::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

const TensorView& TensorSlices::rows(const TensorView& t, int64_t first, int64_t count) {
  auto v = std::make_unique<TensorView>(t);
  const size_t row_bytes = dtype_bytes(t.dtype, t.shape[1]);
  v->shape[0] = count;
  v->data = static_cast<const uint8_t*>(t.data) + row_bytes * static_cast<size_t>(first);
  views_.push_back(std::move(v));
  return *views_.back();
}

const TensorView& TensorSlices::columns(const TensorView& t, int64_t first, int64_t count) {
  int64_t block = 1;
  if (is_ggml_dtype(t.dtype)) {
    const GgmlTypeInfo* info = ggml_type_info(ggml_type_of(t.dtype));
    block = info != nullptr ? info->block_size : 1;
  }
  if (first % block != 0 || count % block != 0)
    refuse(t.name + " [" + std::to_string(t.shape[0]) + " x " + std::to_string(t.shape[1]) + "] is stored as " +
           dtype_name(t.dtype) + " blocks of " + std::to_string(block) + " values: its input columns [" +
           std::to_string(first) + ", " + std::to_string(first + count) +
           ") for this tensor rank cut a block (choose a parallel.tensor that keeps them whole)");
  const size_t row_bytes = dtype_bytes(t.dtype, t.shape[1]);
  const size_t offset = dtype_bytes(t.dtype, first), part = dtype_bytes(t.dtype, count);
  std::vector<uint8_t> copy(part * static_cast<size_t>(t.shape[0]));
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    std::memcpy(copy.data() + part * static_cast<size_t>(r), src + row_bytes * static_cast<size_t>(r) + offset, part);
  auto v = std::make_unique<TensorView>(t);
  v->shape[1] = count;
  v->data = copy.data();
  copies_.push_back(std::move(copy));
  views_.push_back(std::move(v));
  return *views_.back();
}

}  // namespace llmk
