// The CUDA executor's shell; see cuda_executor.hpp. Its parts:
//   cuda_weights      the weights on the device (linear plugin, norms, embedding)
//   cuda_kv_memory    the KV arrays as the attention plugin lays them out
//   cuda_forward      the activations and the forward's calls, op for op the
//                     CPU executor's (core/model.cpp)
//   step_metadata     the step's int32 arrays in one upload; graph buckets
// This file holds the stream and events, the attention plugin and its plan,
// and the order of a step: KV copies, metadata upload, fed-back ids, plan,
// forward (eager or from a graph), the logits event. Nothing in execute()
// waits for the device except the staging of the step's metadata (its
// pinned buffer is reused only after the previous upload finished).
//
// In a parallel job (make_cuda_shard_executor) the executor holds one
// tensor rank's share: weights cut by load_weights, attention, KV memory and
// activations sized by local_model_config, the step's token ids mapped to
// its embedding rows on the host, and the forward's exchanges in
// core/cuda/cuda_tensor_parallel.hpp. Rank 0's limits and slot count are
// broadcast at construction, as the CPU executor does.
//
// Overlapped steps (scheduler.overlap): a step planned before the previous
// one's ids were back lists its fed-back rows; after the metadata upload the
// stream waits for the sampler's ids event and a one-block kernel copies the
// sampled ids into the step's token ids, all on the device. The host never
// waits for the previous step's ids, only for the previous upload to leave
// the pinned buffer.
//
// CUDA graphs (executor.cuda_graphs): a step of decodes only is padded to a
// batch-size bucket (padding rows: token 0 at position 0 of a one-token
// context, K/V not stored, logits ignored) and its metadata goes to that
// bucket's own pinned and device buffers, so every pointer a captured launch
// holds stays valid. The first step of a bucket runs eagerly and is then
// captured (capture records, it does not execute); later steps of the bucket
// upload their metadata into the bucket's device buffer, gather any fed-back
// ids, and replay the graph of the forward. A graph is keyed by the bucket and by the attention
// plugin's workspace size for the step, so a plugin whose plan changes its
// work split gets a graph per split. The attention plugin still plans every
// step on the host (its plan holds no device state the graph depends on
// beyond the bucket's buffers).
//
// Speculative verification (docs/speculative.md): a sequence's 1 + k rows
// with a logits row each are a chunk on the cached context, so such a step
// runs eagerly, as a prefill does. The K/V of rejected drafts stays in
// slots the allocator took back (truncate_seq); no step reads a slot past
// its sequence's context before writing it again. Token trees: the step's
// tree_parents go up with its metadata and reach an attention plugin of
// API 3.3 or later (attends_token_trees); the accepted path's K/V moves
// arrive as the next step's kv_copies, applied on the stream before its
// forward like any row move.
#include "core/cuda/cuda_executor.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/attention_metadata.hpp"
#include "core/cuda/cuda_forward.hpp"
#include "core/cuda/cuda_kv_memory.hpp"
#include "core/cuda/cuda_tensor_parallel.hpp"
#include "core/cuda/cuda_weights.hpp"
#include "core/cuda/device_memory.hpp"
#include "core/cuda/step_metadata.hpp"
#include "core/error.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/sampling.hpp"

namespace llmk {

namespace {

// A captured decode step, instantiated.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  Graph(Graph&& o) noexcept : graph(std::exchange(o.graph, nullptr)), exec(std::exchange(o.exec, nullptr)) {}
  Graph& operator=(Graph&&) = delete;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

// The launcher's index of this process among those on its node (0 alone).
int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::max(0, std::atoi(v));
  return 0;
}

// What a parallel job asks of the CUDA executor that it does not do. Every
// rank refuses alike, before any collective.
void refuse_unsupported(const ParallelJob& job, const EngineConfig& cfg) {
  if (job.pipeline() > 1)
    throw Error(ErrorCode::unsupported, "parallel.pipeline " + std::to_string(job.pipeline()) +
                                            ": the CUDA executor runs tensor parallelism only (parallel.tensor); "
                                            "pipeline stages run on executor.device=cpu");
  // Verification steps across tensor ranks have not been checked on this
  // executor (not even in the simulation): refused rather than untested.
  if (job.tensor() > 1 && cfg.speculative.method != "none")
    throw Error(ErrorCode::unsupported, "speculative.method '" + cfg.speculative.method + "' with parallel.tensor " +
                                            std::to_string(job.tensor()) +
                                            ": the CUDA executor verifies drafts in one process only; set "
                                            "speculative.method none, or parallel.tensor 1");
}

// What cudaGetDeviceCount says: the count, or minus its error.
int32_t probe_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  return status == cudaSuccess ? count : -static_cast<int32_t>(status);
}

std::string probe_text(int32_t seen) {
  return seen < 0 ? cudaGetErrorName(static_cast<cudaError_t>(-seen)) : std::to_string(seen) + " devices";
}

// The devices this process sees. In a job every rank probes and the ranks
// agree before any of them goes on (one collective, before the executor's
// first), so the error names every rank without a device, whichever rank
// reports it first.
int visible_devices(ParallelJob* job) {
  const int32_t seen = probe_devices();
  std::vector<int32_t> all{seen};
  if (job) {
    all.resize(static_cast<size_t>(job->size()));
    job->world().all_gather(&seen, all.data(), 1, DType::i32);
  }
  std::string missing;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] > 0) continue;
    if (!missing.empty()) missing += ", ";
    missing += (job ? "rank " + std::to_string(r) + " " : std::string()) + "(cudaGetDeviceCount: " + probe_text(all[r]) + ")";
  }
  if (!missing.empty())
    throw Error(ErrorCode::unsupported, "executor.device is cuda, but no CUDA device is visible " +
                                            (job ? "to " + missing + " of " + std::to_string(job->size()) : missing) +
                                            "; executor.device=cpu serves on this machine");
  return seen;
}

class CudaExecutor final : public Executor {
 public:
  // With a job: this rank's tensor shard (core/parallel.hpp).
  CudaExecutor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins,
               std::shared_ptr<ParallelJob> job = nullptr)
      : checkpoint_(std::move(checkpoint)), cfg_(checkpoint_->config()), local_(cfg_), job_(std::move(job)) {
    if (job_) {
      refuse_unsupported(*job_, cfg);
      shard_ = model_shard(cfg_, job_->tensor(), job_->pipeline(), job_->rank());
      local_ = local_model_config(cfg_, shard_);
    }
    const int count = visible_devices(job_.get());
    // A rank takes its node's GPU as comm.nccl does (its index on the node).
    device_index_ = job_ ? local_rank() % count : 0;
    check_cuda(cudaSetDevice(device_index_), "selecting the device");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device_index_), "reading the device's properties");
    device_name_ = prop.name;
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the stream");
    check_cuda(cudaEventCreateWithFlags(&logits_ready_, cudaEventDisableTiming), "creating an event");
    check_cuda(cudaEventCreateWithFlags(&meta_uploaded_, cudaEventDisableTiming), "creating an event");
    try {
      build(cfg, plugins);
    } catch (...) {
      release_queue();
      throw;
    }
  }

  ~CudaExecutor() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    // The graphs hold the plugins' kernels: they go before the plugins, whose
    // libraries may unload with their last instance.
    graphs_.clear();
    weights_.host = ModelWeights{};  // the plugins free their device memory before the stream goes
    attention_.reset();
    release_queue();
  }

  Device device() const override { return Device::cuda; }
  const ModelConfig& model_config() const override { return cfg_; }
  const ModelRuntime& runtime() const override { return rt_; }
  size_t weight_bytes() const override { return weights_.bytes(); }
  size_t kv_cache_bytes() const override { return kv_.bytes(); }
  std::string describe() const override {
    return "cuda, " + device_name_ + "; linear " + weights_.host.lm_head->info().name + ", attention " +
           attention_->info().name + (tp_ ? "; " + tp_->describe() : std::string());
  }

  using Executor::execute;
  LogitsView execute(const StepBatch& batch, const SampledIds& previous) override {
    // A streaming sequence's text positions may pass the context length; its
    // cache positions (context_lens) may not, which the plugin checks.
    const uint32_t max_position =
        streaming_ ? static_cast<uint32_t>(std::numeric_limits<int32_t>::max()) : rt_.max_seq_len;
    validate_step(batch, cfg_.vocab_size, max_position, rt_.max_step_tokens);
    validate_fed_back(batch, previous, Device::cuda);
    check_cuda(cudaSetDevice(device_index_), "selecting the device");  // this thread's, for the calls below
    const StepBatch& b = tp_ ? local_step(batch) : batch;
    kv_.apply_copies(b.kv_copies, stream_);
    LogitsView view;
    view.device = Device::cuda;
    view.vocab_size = cfg_.vocab_size;
    view.row_stride = cfg_.vocab_size;
    view.keep_alive = act_.logits;
    view.data = act_.logits->f32();
    const int64_t n = b.num_tokens();
    if (n == 0) return view;
    if (const int32_t bucket = graphs_enabled_ ? graph_bucket(b, rt_.max_step_tokens) : 0; bucket > 0) {
      execute_graph(b, bucket, previous);
    } else {
      MetaBuffers& meta = eager_meta_;
      upload_meta(b, meta);
      gather_fed_back(b, meta, previous);
      plan_attention(b, meta);
      enqueue_forward(forward_state(), b, meta);
    }
    check_cuda(cudaEventRecord(logits_ready_, stream_), "recording the logits event");
    view.num_rows = b.num_logits();
    view.ready.event = logits_ready_;
    return view;
  }

  void copy_logits_to_host(const LogitsView& view, int32_t first_row, int32_t num_rows, float* out) override {
    validate_logits_copy(view, first_row, num_rows, Device::cuda);
    if (view.ready.event != nullptr)
      check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)), "waiting for the logits");
    const size_t row_bytes = static_cast<size_t>(view.vocab_size) * sizeof(float);
    for (int32_t r = 0; r < num_rows; ++r)  // rows are contiguous here (row_stride == vocab_size): one copy each
      check_cuda(cudaMemcpy(out + static_cast<size_t>(r) * view.vocab_size, view.row(first_row + r), row_bytes,
                       cudaMemcpyDeviceToHost),
            "copying logits to the host");
  }

  // Greedy choices on the device (a draft model's drafts: core/draft_proposer.hpp):
  // the sampling kernel over greedy rows, greedy_token's choice, only the ids back.
  bool argmax_rows(const LogitsView& view, std::span<int32_t> out) override {
    if (view.device != Device::cuda || out.size() < static_cast<size_t>(view.num_rows))
      throw Error(ErrorCode::invalid_argument, std::string("argmax_rows: a view of device '") +
                                                   device_name(view.device) + "' and " + std::to_string(out.size()) +
                                                   " outputs for " + std::to_string(view.num_rows) + " rows");
    if (view.num_rows == 0) return true;
    check_cuda(cudaSetDevice(device_index_), "selecting the device");
    const auto rows = static_cast<size_t>(view.num_rows);
    cuda::SamplingRowParams greedy;
    greedy.temperature = 0.0f;
    greedy.num_logprobs = -1;
    const std::vector<cuda::SamplingRowParams> params(rows, greedy);
    check_cuda(argmax_params_.reserve(rows * sizeof(greedy)), "allocating argmax_rows' buffers");
    check_cuda(argmax_ids_.reserve(rows * sizeof(int32_t)), "allocating argmax_rows' buffers");
    check_cuda(argmax_workspace_.reserve(cuda::sampling_workspace_bytes(view.num_rows, view.vocab_size)),
               "allocating argmax_rows' buffers");
    check_cuda(cudaMemcpyAsync(argmax_params_.data(), params.data(), rows * sizeof(greedy), cudaMemcpyHostToDevice,
                               stream_),
               "uploading argmax_rows' parameters");
    check_cuda(cuda::sample_rows(view.data, view.row_stride, view.num_rows, view.vocab_size,
                                 argmax_params_.as<cuda::SamplingRowParams>(), cuda::PenaltyState{},
                                 argmax_workspace_.f32(), argmax_ids_.as<int32_t>(), nullptr, stream_),
               "picking the greedy ids");
    check_cuda(cudaMemcpyAsync(out.data(), argmax_ids_.data(), rows * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
               "copying the greedy ids back");
    check_cuda(cudaStreamSynchronize(stream_), "picking the greedy ids");
    return true;
  }

  // A parallel job's rank 0 announces overlapped steps' ids from the host
  // (ParallelExecutor): the sampler's ids, once its event says they are there.
  void copy_ids_to_host(const SampledIds& ids, int32_t* out) override {
    if (ids.device != Device::cuda) return Executor::copy_ids_to_host(ids, out);
    check_cuda(cudaSetDevice(device_index_), "selecting the device");
    if (ids.ready_event != nullptr)
      check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(ids.ready_event)), "waiting for the sampled ids");
    if (ids.count > 0)
      check_cuda(cudaMemcpy(out, ids.data, static_cast<size_t>(ids.count) * sizeof(int32_t), cudaMemcpyDeviceToHost),
                 "copying the sampled ids to the host");
  }

  // Steps run so far from a replayed graph, and graphs captured (for tests and logs).
  size_t graph_replays() const { return graph_replays_; }
  size_t graphs_captured() const { return graphs_.size(); }

  // Token trees reach the plugin only where it reads them (attention API 3.3).
  bool attends_token_trees() const override {
    return LLMK_API_VERSION_MINOR(attention_->info().api_version) >= 3;
  }

  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override { return kv_.save(slots, stream_); }

  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override {
    kv_.restore(slots, data, stream_);
  }

 private:
  void build(const EngineConfig& ecfg, PluginRegistry& plugins) {
    const ModelConfig& c = local_;  // this rank's share (all of the model outside a job)
    if (c.head_dim % 2 != 0) throw Error(ErrorCode::unsupported, "head_dim must be even for rotary embeddings");
    // StreamingLLM: text positions past the context, the sinks' second query
    // rotation (core/cuda/cuda_forward.hpp); one process only (config_validate).
    streaming_ = ecfg.kv_cache.window > 0;
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the device's memory");
    // Provisional: the KV share of memory is settled after the weights.
    rt_ = resolve_runtime(ecfg, c, checkpoint_->format(), total_bytes);
    // Rank 0 plans the steps: every rank takes its limits, then its slot count.
    agree_with_rank0({&rt_.max_step_tokens, &rt_.max_seq_len});
    if (job_ && job_->tensor() > 1) tp_ = std::make_unique<CudaTensorParallel>(job_, shard_, rt_, cfg_.vocab_size);
    // Host copies inside the forward cannot be captured.
    graphs_enabled_ = ecfg.executor.cuda_graphs && (!tp_ || tp_->on_device());
    weights_ = load_cuda_weights(*checkpoint_, plugins, ecfg, rt_, job_ ? &shard_ : nullptr);

    const llmk_attention_desc ad = attention_desc(c, rt_, ecfg, LLMK_DEVICE_CUDA);
    try {
      attention_ = std::make_unique<AttentionImpl>(plugins.load(ecfg.plugins.attention, LLMK_PLUGIN_ATTENTION), ad);
    } catch (const Error& e) {
      throw with_cuda_plugin_hint(e, "plugins.attention", "attention.cuda");
    }

    // The KV cache: what the configured capacity holds in the plugin's
    // layout, a fraction applying to the memory the weights left free.
    const llmk_kv_layout layout = attention_->kv_layout();
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the device's memory");
    // In a job the configured capacity is the job's, every rank holding its
    // share of each slot; a fraction applies to each device's free memory.
    const uint64_t ranks = job_ ? static_cast<uint64_t>(job_->size()) : 1;
    rt_.num_kv_slots =
        kv_slots_for(ecfg, rt_.max_seq_len, ranks * kv_bytes_per_token(layout, c.num_layers), ranks * free_bytes);
    agree_with_rank0({&rt_.num_kv_slots});
    kv_ = CudaKvMemory(c.num_layers, rt_.num_kv_slots, layout);
    act_ = CudaActivations(c, rt_, ecfg.kv_cache.window, ecfg.kv_cache.window > 0 ? ecfg.kv_cache.sink_tokens : 0);

    spdlog::info("cuda executor: {}; {} layers; linear {} {}, attention {} {}; KV {} x {} slots ({} MiB)",
                 device_name_, c.num_layers, weights_.host.lm_head->info().name,
                 weights_.host.lm_head->info().version, attention_->info().name, attention_->info().version,
                 dtype_name(rt_.kv_dtype), rt_.num_kv_slots, kv_.bytes() >> 20);
  }

  // Rank 0's values on every rank of the job (nothing outside one).
  void agree_with_rank0(std::initializer_list<uint32_t*> values) {
    if (!job_) return;
    std::vector<uint32_t> v;
    for (const uint32_t* x : values) v.push_back(*x);
    job_->world().broadcast(v.data(), v.size(), DType::i32, 0);
    size_t i = 0;
    for (uint32_t* x : values) *x = v[i++];
  }

  // The step with its token ids as rows of this rank's embedding table.
  const StepBatch& local_step(const StepBatch& b) {
    local_batch_ = b;
    tp_->local_ids(local_batch_.token_ids);
    return local_batch_;
  }

  void release_queue() noexcept {
    if (meta_uploaded_ != nullptr) cudaEventDestroy(std::exchange(meta_uploaded_, nullptr));
    if (logits_ready_ != nullptr) cudaEventDestroy(std::exchange(logits_ready_, nullptr));
    if (stream_ != nullptr) cudaStreamDestroy(std::exchange(stream_, nullptr));
  }

  CudaForward forward_state() {
    return CudaForward{local_, rt_, weights_, kv_, *attention_, attention_workspace_, act_, stream_, tp_.get()};
  }

  // The fed-back rows take the previous step's ids, on the device, once the
  // sampler's event says they are there. A failed previous step leaves the
  // host's 0 in them (their sequences are gone; the rows are discarded).
  void gather_fed_back(const StepBatch& b, const MetaBuffers& m, const SampledIds& previous) {
    if (b.fed_back.empty() || previous.failed) return;
    if (previous.ready_event != nullptr)
      check_cuda(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(previous.ready_event), 0),
                 "waiting for the previous step's ids");
    auto* ids = const_cast<int32_t*>(m.at(m.layout.token_ids));
    check_cuda(cuda::gather_fed_back_ids(ids, m.at(m.layout.fed_back_rows), m.at(m.layout.fed_back_previous),
                                         static_cast<int32_t>(b.fed_back.size()), previous.data, cfg_.vocab_size,
                                         stream_),
               "gathering the fed-back ids");
  }

  void enqueue_meta_upload(const MetaBuffers& m) {
    check_cuda(cudaMemcpyAsync(m.device.data(), m.host.data(), m.layout.total * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_),
               "uploading the step's metadata");
  }

  // The step's int32 arrays go up in one copy through pinned memory.
  void upload_meta(const StepBatch& b, MetaBuffers& m) {
    // The pinned buffer is still being read by the previous step's upload
    // until that copy is done.
    check_cuda(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step's upload");
    stage_meta(b, m);
    enqueue_meta_upload(m);
    check_cuda(cudaEventRecord(meta_uploaded_, stream_), "recording the upload event");
  }

  void execute_graph(const StepBatch& b, int32_t bucket, const SampledIds& previous) {
    const StepBatch p = padded_step(b, bucket, rt_.max_seq_len);
    MetaBuffers& meta = graph_meta_[bucket];
    // The pinned buffer is rewritten once the last upload (from any buffer:
    // uploads run in stream order) has left it.
    check_cuda(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step's upload");
    const size_t old_bytes = meta.host.bytes();
    const std::pair<int32_t, int32_t> shape{p.block_size, p.max_blocks_per_seq};
    stage_meta(p, meta);
    // New buffers: every graph of the bucket points at the old ones. Another
    // block size or table width (steps from an allocator of another block
    // size on the same executor): the graphs hold the old ones, and the
    // offsets of the arrays after the block tables.
    if (meta.host.bytes() != old_bytes || shape != graph_shapes_[bucket]) {
      for (auto it = graphs_.begin(); it != graphs_.end();)
        it = it->first.first == bucket ? graphs_.erase(it) : std::next(it);
    }
    graph_shapes_[bucket] = shape;
    const size_t workspace_bytes = plan_attention(p, meta);
    // The upload and the gather stay outside the graph: it holds the forward
    // alone, over the bucket's device buffer.
    enqueue_meta_upload(meta);
    check_cuda(cudaEventRecord(meta_uploaded_, stream_), "recording the upload event");
    gather_fed_back(p, meta, previous);
    const auto key = std::make_pair(bucket, workspace_bytes);
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) {
      check_cuda(cudaGraphLaunch(found->second.exec, stream_), "replaying a decode graph");
      ++graph_replays_;
      return;
    }
    // First step of this shape: run it eagerly, then capture the same work.
    enqueue_forward(forward_state(), p, meta);
    check_cuda(cudaStreamSynchronize(stream_), "finishing the step before a capture");
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "beginning a capture");
    cudaGraph_t graph = nullptr;
    try {
      enqueue_forward(forward_state(), p, meta);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    check_cuda(cudaStreamEndCapture(stream_, &graph), "ending a capture");
    Graph g;
    g.graph = graph;
    check_cuda(cudaGraphInstantiate(&g.exec, graph, 0), "instantiating a decode graph");
    graphs_.emplace(key, std::move(g));
  }

  // Plans the step's attention once (host side) and sizes its workspace.
  size_t plan_attention(const StepBatch& b, const MetaBuffers& m) {
    const llmk_attention_step step =
        attention_step(b, rt_.num_kv_slots,
                       {m.at(m.layout.query_start), m.at(m.layout.context_lens), m.at(m.layout.slot_mapping),
                        m.at(m.layout.block_tables),
                        b.tree_parents.empty() ? nullptr : m.at(m.layout.tree_parents)});
    const size_t workspace_bytes = attention_->plan(step);
    if (workspace_bytes > attention_workspace_.bytes()) {
      // Graphs hold the old workspace's address: they go with it.
      graphs_.clear();
      check_cuda(cudaStreamSynchronize(stream_), "growing the attention workspace");
      attention_workspace_ = device_buffer(workspace_bytes, "the attention workspace");
    }
    return workspace_bytes;
  }

  std::shared_ptr<const Checkpoint> checkpoint_;
  ModelConfig cfg_;    // the whole model (what callers see)
  ModelConfig local_;  // this rank's share of it (cfg_ outside a job)
  std::shared_ptr<ParallelJob> job_;  // null outside a parallel job
  ModelShard shard_;
  std::unique_ptr<CudaTensorParallel> tp_;  // tensor degree > 1
  StepBatch local_batch_;                   // tensor parallelism: the step with this rank's table rows
  int device_index_ = 0;
  ModelRuntime rt_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t logits_ready_ = nullptr;   // recorded after the lm_head
  cudaEvent_t meta_uploaded_ = nullptr;  // recorded after the metadata copy

  CudaWeights weights_;
  std::unique_ptr<AttentionImpl> attention_;
  cuda::DeviceBuffer attention_workspace_;  // grown to the largest plan() so far
  CudaKvMemory kv_;
  CudaActivations act_;

  cuda::DeviceBuffer argmax_params_, argmax_ids_, argmax_workspace_;  // argmax_rows' (grown to its largest view)
  MetaBuffers eager_meta_;                              // steps that run eagerly
  std::map<int32_t, MetaBuffers> graph_meta_;           // by bucket: what its graphs read
  std::map<std::pair<int32_t, size_t>, Graph> graphs_;  // by (bucket, attention workspace bytes)
  std::map<int32_t, std::pair<int32_t, int32_t>> graph_shapes_;  // by bucket: the block size and table width its graphs hold
  bool graphs_enabled_ = true;
  bool streaming_ = false;  // kv_cache.window: text positions may pass max_seq_len
  size_t graph_replays_ = 0;
};

}  // namespace

CudaGraphStats cuda_graph_stats(const Executor& executor) {
  const auto* cuda = dynamic_cast<const CudaExecutor*>(&executor);
  return cuda == nullptr ? CudaGraphStats{} : CudaGraphStats{cuda->graph_replays(), cuda->graphs_captured()};
}

std::unique_ptr<Executor> make_cuda_executor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint,
                                             PluginRegistry& plugins) {
  return std::make_unique<CudaExecutor>(cfg, std::move(checkpoint), plugins);
}

std::unique_ptr<Executor> make_cuda_shard_executor(const EngineConfig& cfg,
                                                   std::shared_ptr<const Checkpoint> checkpoint,
                                                   PluginRegistry& plugins, std::shared_ptr<ParallelJob> job) {
  return std::make_unique<CudaExecutor>(cfg, std::move(checkpoint), plugins, std::move(job));
}

}  // namespace llmk
