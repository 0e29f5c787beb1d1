// The Llama forward on a CUDA device; see cuda_executor.hpp. The order of
// operations is the CPU executor's (core/model.cpp), op for op:
//   embedding -> per layer: [residual add +] rmsnorm -> qkv (linear plugin)
//   [+ bias] -> rope -> split q/k/v -> attention plugin (writes K/V, attends)
//   -> o_proj -> residual add + rmsnorm -> gate_up -> silu*up -> down
//   -> final residual add + rmsnorm -> lm_head on the logits rows only.
// The last layer's o_proj and MLP run on the logits rows only, as on the CPU.
// Every kernel and plugin call is enqueued on one stream; nothing in
// execute() waits for the device except the staging of the step's metadata
// (its pinned buffer is reused only after the previous upload finished).
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
#include "core/cuda/cuda_executor.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/model_runtime.hpp"
#include "core/model_weights.hpp"
#include "core/rope_scaling.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/hadamard.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/rows.hpp"
#include "kernels/cuda/silu_mul.hpp"

namespace llmk {

namespace {

[[noreturn]] void cuda_failed(cudaError_t status, const std::string& what) {
  throw Error(ErrorCode::internal, "CUDA executor: " + what + ": " + cudaGetErrorName(status) + " (" +
                                       cudaGetErrorString(status) + ")");
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) cuda_failed(status, what);
}

// Device memory, freed with the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t status = cudaMalloc(&data_, bytes);
    if (status != cudaSuccess) cuda_failed(status, "allocating " + std::to_string(bytes) + " bytes for " + what);
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

DeviceBuffer upload(const void* host, size_t bytes, const char* what) {
  DeviceBuffer d(bytes, what);
  if (bytes != 0) check(cudaMemcpy(d.data(), host, bytes, cudaMemcpyHostToDevice), what);
  return d;
}

DeviceBuffer upload(const std::vector<float>& host, const char* what) {
  return upload(host.data(), host.size() * sizeof(float), what);
}

// Pinned host memory for the step's metadata upload.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes != 0) check(cudaMallocHost(&data_, bytes), "allocating pinned host memory");
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void* allocate_device_workspace(size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) cuda_failed(status, "allocating the linear layers' workspace");
  return p;
}

void release_device_workspace(void* p) noexcept { cudaFree(p); }

// memmove within one device array: a copy whose ranges overlap goes in
// pieces no longer than the distance, in the order that reads every byte
// before it is overwritten.
void device_move(unsigned char* base, size_t dst, size_t src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return;
  const size_t distance = dst > src ? dst - src : src - dst;
  if (distance >= bytes) {
    check(cudaMemcpyAsync(base + dst, base + src, bytes, cudaMemcpyDeviceToDevice, stream), "a KV slot copy");
    return;
  }
  if (dst < src) {
    for (size_t done = 0; done < bytes; done += distance)
      check(cudaMemcpyAsync(base + dst + done, base + src + done, std::min(distance, bytes - done),
                            cudaMemcpyDeviceToDevice, stream),
            "a KV slot copy");
  } else {
    for (size_t left = bytes; left > 0;) {
      const size_t piece = std::min(distance, left);
      left -= piece;
      check(cudaMemcpyAsync(base + dst + left, base + src + left, piece, cudaMemcpyDeviceToDevice, stream),
            "a KV slot copy");
    }
  }
}

// A plugin that refused the CUDA device, with what to configure instead
// (the defaults name the CPU plugins).
Error with_cuda_plugin_hint(const Error& e, const char* key, const char* plugins) {
  if (e.code() != ErrorCode::plugin) return e;
  return Error(ErrorCode::plugin,
               std::string(e.what()) + " (executor.device=cuda needs a CUDA plugin in " + key + ": " + plugins + ")");
}

struct DeviceLayer {
  DeviceBuffer input_norm, post_norm, qkv_bias;  // f32
};

// One layer's KV arrays; per-slot sizes from the attention plugin's layout.
struct DeviceKvLayer {
  DeviceBuffer k, v, k_scale, v_scale;
  DeviceBuffer* array(int i) { return i == 0 ? &k : i == 1 ? &v : i == 2 ? &k_scale : &v_scale; }
};

// The offsets of the step's arrays inside the metadata buffer, in int32s.
struct MetaLayout {
  size_t token_ids, positions, query_start, context_lens, slot_mapping, block_tables, logits_rows;
  size_t fed_back_rows, fed_back_previous;  // [fed_back.size()] each
  size_t total;
};

MetaLayout meta_layout(const StepBatch& b) {
  MetaLayout m{};
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t here = at;
    at += (n + 15) / 16 * 16;  // 64-byte aligned arrays
    return here;
  };
  m.token_ids = take(b.token_ids.size());
  m.positions = take(b.positions.size());
  m.query_start = take(b.query_start.size());
  m.context_lens = take(b.context_lens.size());
  m.slot_mapping = take(b.slot_mapping.size());
  m.block_tables = take(b.block_tables.size());
  m.logits_rows = take(b.logits_rows.size());
  m.fed_back_rows = take(b.fed_back.size());
  m.fed_back_previous = take(b.fed_back.size());
  m.total = at;
  return m;
}

// A step's metadata: its layout, the pinned staging and the device copy.
struct MetaBuffers {
  MetaLayout layout{};
  PinnedBuffer host;
  DeviceBuffer device;
  const int32_t* at(size_t offset) const { return static_cast<const int32_t*>(device.data()) + offset; }
};

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

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const EngineConfig& cfg, std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins)
      : checkpoint_(std::move(checkpoint)), cfg_(checkpoint_->config()) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
      throw Error(ErrorCode::unsupported,
                  std::string("executor.device is cuda, but no CUDA device is visible (cudaGetDeviceCount: ") +
                      (status != cudaSuccess ? cudaGetErrorName(status) : "0 devices") +
                      "); executor.device=cpu serves on this machine");
    check(cudaSetDevice(0), "selecting device 0");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "reading the device's properties");
    device_name_ = prop.name;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the stream");
    check(cudaEventCreateWithFlags(&logits_ready_, cudaEventDisableTiming), "creating an event");
    check(cudaEventCreateWithFlags(&meta_uploaded_, cudaEventDisableTiming), "creating an event");
    try {
      build(cfg, plugins);
    } catch (...) {
      release_queue();
      throw;
    }
  }

  ~CudaExecutor() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    weights_ = ModelWeights{};  // the plugins free their device memory before the stream goes
    attention_.reset();
    release_queue();
  }

  Device device() const override { return Device::cuda; }
  const ModelConfig& model_config() const override { return cfg_; }
  const ModelRuntime& runtime() const override { return rt_; }
  size_t weight_bytes() const override { return weights_.bytes() - weights_.embed->nbytes() + embed_.bytes(); }
  size_t kv_cache_bytes() const override { return kv_bytes_; }
  std::string describe() const override {
    return "cuda, " + device_name_ + "; linear " + weights_.lm_head->info().name + ", attention " +
           attention_->info().name;
  }

  using Executor::execute;
  LogitsView execute(const StepBatch& b, const SampledIds& previous) override {
    validate_step(b, cfg_.vocab_size, rt_.max_seq_len, rt_.max_step_tokens);
    validate_fed_back(b, previous, Device::cuda);
    apply_copies(b.kv_copies);
    LogitsView view;
    view.device = Device::cuda;
    view.vocab_size = cfg_.vocab_size;
    view.row_stride = cfg_.vocab_size;
    view.keep_alive = logits_;
    view.data = logits_->f32();
    const int64_t n = b.num_tokens();
    if (n == 0) return view;
    if (const int32_t bucket = graph_bucket(b); bucket > 0) {
      execute_graph(b, bucket, previous);
    } else {
      MetaBuffers& meta = eager_meta_;
      upload_meta(b, meta);
      gather_fed_back(b, meta, previous);
      forward(b, meta);
    }
    check(cudaEventRecord(logits_ready_, stream_), "recording the logits event");
    view.num_rows = b.num_logits();
    view.ready.event = logits_ready_;
    return view;
  }

  void copy_logits_to_host(const LogitsView& view, int32_t first_row, int32_t num_rows, float* out) override {
    validate_logits_copy(view, first_row, num_rows, Device::cuda);
    if (view.ready.event != nullptr)
      check(cudaEventSynchronize(static_cast<cudaEvent_t>(view.ready.event)), "waiting for the logits");
    const size_t row_bytes = static_cast<size_t>(view.vocab_size) * sizeof(float);
    for (int32_t r = 0; r < num_rows; ++r)  // rows are contiguous here (row_stride == vocab_size): one copy each
      check(cudaMemcpy(out + static_cast<size_t>(r) * view.vocab_size, view.row(first_row + r), row_bytes,
                       cudaMemcpyDeviceToHost),
            "copying logits to the host");
  }

  // Steps run so far from a replayed graph, and graphs captured (for tests and logs).
  size_t graph_replays() const { return graph_replays_; }
  size_t graphs_captured() const { return graphs_.size(); }

  std::vector<uint8_t> save_kv(const std::vector<int32_t>& slots) override {
    check_slots(slots, "save_kv");
    check(cudaStreamSynchronize(stream_), "finishing the step before a KV save");
    std::vector<uint8_t> out(slots.size() * saved_bytes_per_slot());
    uint8_t* dst = out.data();
    for (DeviceKvLayer& l : kv_)
      for (int32_t s : slots)
        for (int a = 0; a < 4; ++a) {
          const size_t per_slot = per_slot_[a];
          if (per_slot == 0) continue;
          check(cudaMemcpy(dst, static_cast<uint8_t*>(l.array(a)->data()) + static_cast<size_t>(s) * per_slot,
                           per_slot, cudaMemcpyDeviceToHost),
                "saving KV slots");
          dst += per_slot;
        }
    return out;
  }

  void restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) override {
    check_slots(slots, "restore_kv");
    if (data.size() != slots.size() * saved_bytes_per_slot())
      throw Error(ErrorCode::invalid_argument, "restore_kv: " + std::to_string(data.size()) +
                                                   " bytes do not hold " + std::to_string(slots.size()) + " slots");
    check(cudaStreamSynchronize(stream_), "finishing the step before a KV restore");
    const uint8_t* src = data.data();
    for (DeviceKvLayer& l : kv_)
      for (int32_t s : slots)
        for (int a = 0; a < 4; ++a) {
          const size_t per_slot = per_slot_[a];
          if (per_slot == 0) continue;
          check(cudaMemcpy(static_cast<uint8_t*>(l.array(a)->data()) + static_cast<size_t>(s) * per_slot, src,
                           per_slot, cudaMemcpyHostToDevice),
                "restoring KV slots");
          src += per_slot;
        }
  }

 private:
  void build(const EngineConfig& ecfg, PluginRegistry& plugins) {
    const ModelConfig& c = cfg_;
    if (c.head_dim % 2 != 0) throw Error(ErrorCode::unsupported, "head_dim must be even for rotary embeddings");
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the device's memory");
    // Provisional: the KV share of memory is settled after the weights.
    rt_ = resolve_runtime(ecfg, c, total_bytes);
    graphs_enabled_ = ecfg.executor.cuda_graphs;
    LinearPlacement placement;
    placement.device = LLMK_DEVICE_CUDA;
    placement.workspace = std::make_shared<LinearWorkspace>(&allocate_device_workspace, &release_device_workspace);
    try {
      weights_ = load_weights(*checkpoint_, plugins, ecfg, rt_, placement);
    } catch (const Error& e) {
      throw with_cuda_plugin_hint(e, "plugins.linear", "linear.cublas, linear.cuda_int8, linear.cuda_int4 or linear.cuda_fp8");
    }
    const TensorView& embed = *weights_.embed;
    embed_ = upload(embed.data, embed.nbytes(), "the embedding table");
    embed_dtype_ = static_cast<llmk_dtype>(embed.dtype);
    layers_.resize(static_cast<size_t>(c.num_layers));
    for (int32_t i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = weights_.layers[i];
      layers_[i].input_norm = upload(l.input_norm, "a norm weight");
      layers_[i].post_norm = upload(l.post_norm, "a norm weight");
      layers_[i].qkv_bias = upload(l.qkv_bias, "a q/k/v bias");
    }
    final_norm_ = upload(weights_.final_norm, "the final norm weight");

    llmk_attention_desc ad{};
    ad.struct_size = sizeof(ad);
    ad.num_heads = static_cast<uint32_t>(c.num_heads);
    ad.num_kv_heads = static_cast<uint32_t>(c.num_kv_heads);
    ad.head_dim = static_cast<uint32_t>(c.head_dim);
    ad.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    ad.kv_dtype = static_cast<uint32_t>(rt_.kv_dtype);
    ad.kv_group_size = rt_.kv_group_size;
    ad.max_context = rt_.max_seq_len;
    ad.max_tokens = rt_.max_step_tokens;
    ad.num_threads = 1;
    ad.options = ecfg.plugins.attention_options.c_str();
    ad.sliding_window = c.sliding_window && static_cast<uint32_t>(*c.sliding_window) < rt_.max_seq_len
                            ? static_cast<uint32_t>(*c.sliding_window)
                            : 0;
    ad.device = LLMK_DEVICE_CUDA;
    ad.activation_dtype = LLMK_DTYPE_F32;
    ad.max_seqs = std::max<uint32_t>(1, ecfg.scheduler.max_num_seqs);
    ad.block_size = ecfg.kv_cache.block_size;
    try {
      attention_ = std::make_unique<AttentionImpl>(plugins.load(ecfg.plugins.attention, LLMK_PLUGIN_ATTENTION), ad);
    } catch (const Error& e) {
      throw with_cuda_plugin_hint(e, "plugins.attention", "attention.cuda");
    }

    // The KV cache: what the configured capacity holds in the plugin's
    // layout, a fraction applying to the memory the weights left free.
    const llmk_kv_layout layout = attention_->kv_layout();
    per_slot_ = {layout.k_bytes_per_slot, layout.v_bytes_per_slot, layout.k_scale_bytes_per_slot,
                 layout.v_scale_bytes_per_slot};
    uint64_t per_token = 0;
    for (uint64_t b : per_slot_) per_token += b * static_cast<uint64_t>(c.num_layers);
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the device's memory");
    rt_.num_kv_slots = kv_slots_for(ecfg, rt_.max_seq_len, per_token, free_bytes);
    kv_.resize(static_cast<size_t>(c.num_layers));
    for (DeviceKvLayer& l : kv_)
      for (int a = 0; a < 4; ++a) {
        const size_t bytes = per_slot_[a] * rt_.num_kv_slots;
        *l.array(a) = DeviceBuffer(bytes, "the KV cache");
        if (bytes != 0) check(cudaMemset(l.array(a)->data(), 0, bytes), "clearing the KV cache");
        kv_bytes_ += bytes;
      }

    const int64_t half = c.head_dim / 2;
    std::vector<float> cos_table(static_cast<size_t>(rt_.max_seq_len) * half), sin_table(cos_table.size());
    rope_tables(c, rt_.max_seq_len, cos_table.data(), sin_table.data());
    rope_cos_ = upload(cos_table, "the rotary tables");
    rope_sin_ = upload(sin_table, "the rotary tables");

    q_dim_ = static_cast<int64_t>(c.num_heads) * c.head_dim;
    kv_dim_ = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
    qkv_dim_ = q_dim_ + 2 * kv_dim_;
    const size_t t = rt_.max_step_tokens, f = sizeof(float);
    hidden_ = DeviceBuffer(t * c.hidden_size * f, "activations");
    x_norm_ = DeviceBuffer(t * c.hidden_size * f, "activations");
    qkv_ = DeviceBuffer(t * qkv_dim_ * f, "activations");
    q_ = DeviceBuffer(t * q_dim_ * f, "activations");
    k_ = DeviceBuffer(t * kv_dim_ * f, "activations");
    v_ = DeviceBuffer(t * kv_dim_ * f, "activations");
    attn_ = DeviceBuffer(t * q_dim_ * f, "activations");
    proj_ = DeviceBuffer(t * c.hidden_size * f, "activations");
    gate_up_ = DeviceBuffer(t * 2 * c.intermediate_size * f, "activations");
    act_ = DeviceBuffer(t * c.intermediate_size * f, "activations");
    logits_ = std::make_shared<DeviceBuffer>(t * static_cast<size_t>(c.vocab_size) * f, "the logits");

    spdlog::info("cuda executor: {}; {} layers; linear {} {}, attention {} {}; KV {} x {} slots ({} MiB)",
                 device_name_, c.num_layers, weights_.lm_head->info().name, weights_.lm_head->info().version,
                 attention_->info().name, attention_->info().version, dtype_name(rt_.kv_dtype), rt_.num_kv_slots,
                 kv_bytes_ >> 20);
  }

  void release_queue() noexcept {
    if (meta_uploaded_ != nullptr) cudaEventDestroy(std::exchange(meta_uploaded_, nullptr));
    if (logits_ready_ != nullptr) cudaEventDestroy(std::exchange(logits_ready_, nullptr));
    if (stream_ != nullptr) cudaStreamDestroy(std::exchange(stream_, nullptr));
  }

  size_t saved_bytes_per_slot() const {
    size_t per_slot = 0;
    for (uint64_t b : per_slot_) per_slot += b;
    return per_slot * kv_.size();
  }

  void check_slots(const std::vector<int32_t>& slots, const char* what) const {
    for (int32_t s : slots)
      if (s < 0 || static_cast<uint32_t>(s) >= rt_.num_kv_slots)
        throw Error(ErrorCode::invalid_argument, std::string(what) + ": slot " + std::to_string(s) +
                                                     " outside the cache");
  }

  void apply_copies(const std::vector<llmk_kv_copy>& copies) {
    for (const llmk_kv_copy& c : copies) {
      if (c.src_slot < 0 || c.dst_slot < 0 || c.num_slots < 0 ||
          static_cast<int64_t>(std::max(c.src_slot, c.dst_slot)) + c.num_slots > rt_.num_kv_slots)
        throw Error(ErrorCode::invalid_argument, "kv copy outside the cache");
      for (DeviceKvLayer& l : kv_)
        for (int a = 0; a < 4; ++a) {
          const size_t per_slot = per_slot_[a];
          if (per_slot == 0) continue;
          device_move(static_cast<unsigned char*>(l.array(a)->data()), c.dst_slot * per_slot,
                      c.src_slot * per_slot, c.num_slots * per_slot, stream_);
        }
    }
  }

  // Writes the step's int32 arrays into the pinned buffer (growing both
  // buffers when the step needs more room).
  void stage_meta(const StepBatch& b, MetaBuffers& m) {
    m.layout = meta_layout(b);
    const size_t bytes = m.layout.total * sizeof(int32_t);
    if (bytes > m.host.bytes()) {
      m.host = PinnedBuffer(bytes);
      m.device = DeviceBuffer(bytes, "the step's metadata");
    }
    auto* host = static_cast<int32_t*>(m.host.data());
    auto put = [&](size_t at, const std::vector<int32_t>& v) {
      if (!v.empty()) std::memcpy(host + at, v.data(), v.size() * sizeof(int32_t));
    };
    put(m.layout.token_ids, b.token_ids);
    put(m.layout.positions, b.positions);
    put(m.layout.query_start, b.query_start);
    put(m.layout.context_lens, b.context_lens);
    put(m.layout.slot_mapping, b.slot_mapping);
    put(m.layout.block_tables, b.block_tables);
    put(m.layout.logits_rows, b.logits_rows);
    for (size_t i = 0; i < b.fed_back.size(); ++i) {
      host[m.layout.fed_back_rows + i] = b.fed_back[i].row;
      host[m.layout.fed_back_previous + i] = b.fed_back[i].previous_row;
    }
  }

  // The fed-back rows take the previous step's ids, on the device, once the
  // sampler's event says they are there. A failed previous step leaves the
  // host's 0 in them (their sequences are gone; the rows are discarded).
  void gather_fed_back(const StepBatch& b, const MetaBuffers& m, const SampledIds& previous) {
    if (b.fed_back.empty() || previous.failed) return;
    if (previous.ready_event != nullptr)
      check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(previous.ready_event), 0),
            "waiting for the previous step's ids");
    auto* ids = const_cast<int32_t*>(m.at(m.layout.token_ids));
    check(cuda::gather_fed_back_ids(ids, m.at(m.layout.fed_back_rows), m.at(m.layout.fed_back_previous),
                                    static_cast<int32_t>(b.fed_back.size()), previous.data, cfg_.vocab_size,
                                    stream_),
          "gathering the fed-back ids");
  }

  void enqueue_meta_upload(const MetaBuffers& m) {
    check(cudaMemcpyAsync(m.device.data(), m.host.data(), m.layout.total * sizeof(int32_t), cudaMemcpyHostToDevice,
                          stream_),
          "uploading the step's metadata");
  }

  // The step's int32 arrays go up in one copy through pinned memory.
  void upload_meta(const StepBatch& b, MetaBuffers& m) {
    // The pinned buffer is still being read by the previous step's upload
    // until that copy is done.
    check(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step's upload");
    stage_meta(b, m);
    enqueue_meta_upload(m);
    check(cudaEventRecord(meta_uploaded_, stream_), "recording the upload event");
  }

  // The bucket a step is replayed in, or 0 for an eager step: graphs on, and
  // every sequence decoding one token with its logits row, in order.
  int32_t graph_bucket(const StepBatch& b) const {
    if (!graphs_enabled_) return 0;
    const int32_t n = b.num_tokens();
    if (b.num_seqs() != n || b.num_logits() != n) return 0;
    for (int32_t i = 0; i < n; ++i)
      if (b.logits_rows[i] != i || b.query_start[i + 1] != i + 1) return 0;
    const int32_t bucket = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : (n + 7) / 8 * 8;
    return bucket <= static_cast<int32_t>(rt_.max_step_tokens) ? bucket : 0;
  }

  // The decode step padded to `bucket` rows, its tables to the widest a
  // sequence can need at this block size.
  StepBatch padded_step(const StepBatch& b, int32_t bucket) const {
    const int32_t n = b.num_tokens();
    const int32_t width = static_cast<int32_t>((rt_.max_seq_len + b.block_size - 1) / b.block_size);
    StepBatch p;
    p.block_size = b.block_size;
    p.max_blocks_per_seq = std::max(width, b.max_blocks_per_seq);
    p.token_ids = b.token_ids;
    p.positions = b.positions;
    p.slot_mapping = b.slot_mapping;
    p.context_lens = b.context_lens;
    p.query_start = b.query_start;
    p.logits_rows = b.logits_rows;
    p.fed_back = b.fed_back;
    p.block_tables.assign(static_cast<size_t>(bucket) * p.max_blocks_per_seq, 0);
    for (int32_t s = 0; s < n; ++s)
      std::copy_n(b.block_tables.begin() + static_cast<int64_t>(s) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                  p.block_tables.begin() + static_cast<int64_t>(s) * p.max_blocks_per_seq);
    for (int32_t s = n; s < bucket; ++s) {
      p.token_ids.push_back(0);
      p.positions.push_back(0);
      p.slot_mapping.push_back(-1);  // nothing stored
      p.context_lens.push_back(1);   // reads slot 0, whatever it holds; the row is ignored
      p.query_start.push_back(s + 1);
      p.logits_rows.push_back(s);
    }
    return p;
  }

  void execute_graph(const StepBatch& b, int32_t bucket, const SampledIds& previous) {
    const StepBatch p = padded_step(b, bucket);
    MetaBuffers& meta = graph_meta_[bucket];
    // The pinned buffer is rewritten once the last upload (from any buffer:
    // uploads run in stream order) has left it.
    check(cudaEventSynchronize(meta_uploaded_), "waiting for the previous step's upload");
    const size_t old_bytes = meta.host.bytes();
    stage_meta(p, meta);
    if (meta.host.bytes() != old_bytes) {
      // New buffers: every graph of the bucket points at the old ones.
      for (auto it = graphs_.begin(); it != graphs_.end();)
        it = it->first.first == bucket ? graphs_.erase(it) : std::next(it);
    }
    const size_t workspace_bytes = plan_attention(p, meta);
    // The upload and the gather stay outside the graph: it holds the forward
    // alone, over the bucket's device buffer.
    enqueue_meta_upload(meta);
    check(cudaEventRecord(meta_uploaded_, stream_), "recording the upload event");
    gather_fed_back(p, meta, previous);
    const auto key = std::make_pair(bucket, workspace_bytes);
    const auto found = graphs_.find(key);
    if (found != graphs_.end()) {
      check(cudaGraphLaunch(found->second.exec, stream_), "replaying a decode graph");
      ++graph_replays_;
      return;
    }
    // First step of this shape: run it eagerly, then capture the same work.
    forward(p, meta, /*planned=*/true);
    check(cudaStreamSynchronize(stream_), "finishing the step before a capture");
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "beginning a capture");
    cudaGraph_t graph = nullptr;
    try {
      forward(p, meta, /*planned=*/true);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), "ending a capture");
    Graph g;
    g.graph = graph;
    check(cudaGraphInstantiate(&g.exec, graph, 0), "instantiating a decode graph");
    graphs_.emplace(key, std::move(g));
  }

  // Plans the step's attention once (host side) and sizes its workspace.
  size_t plan_attention(const StepBatch& b, const MetaBuffers& m) {
    llmk_attention_step step{};
    step.struct_size = sizeof(step);
    step.num_tokens = static_cast<uint32_t>(b.num_tokens());
    step.num_seqs = static_cast<uint32_t>(b.num_seqs());
    step.max_blocks_per_seq = static_cast<uint32_t>(b.max_blocks_per_seq);
    step.block_size = static_cast<uint32_t>(b.block_size);
    step.num_slots = rt_.num_kv_slots;
    step.query_start = b.query_start.data();
    step.context_lens = b.context_lens.data();
    step.slot_mapping = b.slot_mapping.data();
    step.block_tables = b.block_tables.data();
    step.device_query_start = m.at(m.layout.query_start);
    step.device_context_lens = m.at(m.layout.context_lens);
    step.device_slot_mapping = m.at(m.layout.slot_mapping);
    step.device_block_tables = m.at(m.layout.block_tables);
    const size_t workspace_bytes = attention_->plan(step);
    if (workspace_bytes > attention_workspace_.bytes()) {
      // Graphs hold the old workspace's address: they go with it.
      graphs_.clear();
      check(cudaStreamSynchronize(stream_), "growing the attention workspace");
      attention_workspace_ = DeviceBuffer(workspace_bytes, "the attention workspace");
    }
    return workspace_bytes;
  }

  void forward(const StepBatch& b, const MetaBuffers& m, bool planned = false) {
    const ModelConfig& c = cfg_;
    const int64_t n = b.num_tokens(), num_logits = b.num_logits(), h = c.hidden_size;
    const int64_t inter = c.intermediate_size, hd = c.head_dim;
    const float eps = c.rms_norm_eps;
    float* hidden = hidden_.f32();
    float* x_norm = x_norm_.f32();
    float* qkv = qkv_.f32();
    float* proj = proj_.f32();
    float* attn = attn_.f32();

    check(cuda::embedding(embed_.data(), embed_dtype_, c.vocab_size, h, m.at(m.layout.token_ids), n, hidden, nullptr,
                          stream_),
          "embedding");

    if (!planned) plan_attention(b, m);

    for (int32_t li = 0; li < c.num_layers; ++li) {
      LayerWeights& l = weights_.layers[li];
      const DeviceLayer& dl = layers_[li];
      // proj holds the previous layer's MLP output: fold it into the residual.
      check(cuda::rmsnorm(hidden, li == 0 ? nullptr : proj, dl.input_norm.data(), LLMK_DTYPE_F32, x_norm, n, h, eps,
                          stream_),
            "rmsnorm");
      l.qkv->forward(x_norm, qkv, static_cast<uint32_t>(n), stream_);
      if (dl.qkv_bias.bytes() != 0)
        check(cuda::add_bias_rows(qkv, qkv_dim_, dl.qkv_bias.f32(), static_cast<int32_t>(n),
                                  static_cast<int32_t>(qkv_dim_), stream_),
              "q/k/v bias");
      check(cuda::rope(qkv, qkv_dim_, c.num_heads, qkv + q_dim_, qkv_dim_, c.num_kv_heads, n, hd,
                       m.at(m.layout.positions), rope_cos_.f32(), rope_sin_.f32(), stream_),
            "rope");
      check(cuda::copy_rows(qkv, qkv_dim_, q_.f32(), q_dim_, static_cast<int32_t>(n), static_cast<int32_t>(q_dim_),
                            stream_),
            "splitting q");
      check(cuda::copy_rows(qkv + q_dim_, qkv_dim_, k_.f32(), kv_dim_, static_cast<int32_t>(n),
                            static_cast<int32_t>(kv_dim_), stream_),
            "splitting k");
      check(cuda::copy_rows(qkv + q_dim_ + kv_dim_, qkv_dim_, v_.f32(), kv_dim_, static_cast<int32_t>(n),
                            static_cast<int32_t>(kv_dim_), stream_),
            "splitting v");

      if (rt_.key_rotation != 0) {
        // An int8 cache holds rotated keys; rotated queries give the same scores.
        check(cuda::hadamard_blocks(q_.f32(), n * q_dim_, rt_.key_rotation, stream_), "rotating q");
        check(cuda::hadamard_blocks(k_.f32(), n * kv_dim_, rt_.key_rotation, stream_), "rotating k");
      }

      llmk_attention_layer a{};
      a.struct_size = sizeof(a);
      a.q = q_.data();
      a.k = k_.data();
      a.v = v_.data();
      a.out = attn;
      DeviceKvLayer& kv = kv_[static_cast<size_t>(li)];
      a.kv = {kv.k.data(), kv.v.data(), static_cast<float*>(kv.k_scale.data()), static_cast<float*>(kv.v_scale.data()),
              rt_.num_kv_slots};
      attention_->run(a, attention_workspace_.data(), attention_workspace_.bytes(), stream_);

      int64_t rows = n;
      if (li == c.num_layers - 1) {
        // Only the logits rows go on: gather them (in logits order) to the front.
        if (num_logits == 0) return;
        check(cuda::gather_rows(attn, m.at(m.layout.logits_rows), q_.f32(), static_cast<int32_t>(num_logits),
                                static_cast<int32_t>(q_dim_), stream_),
              "gathering the logits rows");
        check(cuda::gather_rows(hidden, m.at(m.layout.logits_rows), x_norm, static_cast<int32_t>(num_logits),
                                static_cast<int32_t>(h), stream_),
              "gathering the logits rows");
        check(cudaMemcpyAsync(attn, q_.data(), static_cast<size_t>(num_logits * q_dim_) * 4, cudaMemcpyDeviceToDevice,
                              stream_),
              "gathering the logits rows");
        check(cudaMemcpyAsync(hidden, x_norm, static_cast<size_t>(num_logits * h) * 4, cudaMemcpyDeviceToDevice,
                              stream_),
              "gathering the logits rows");
        rows = num_logits;
      }
      const auto urows = static_cast<uint32_t>(rows);
      l.o->forward(attn, proj, urows, stream_);
      check(cuda::rmsnorm(hidden, proj, dl.post_norm.data(), LLMK_DTYPE_F32, x_norm, rows, h, eps, stream_),
            "rmsnorm");
      l.gate_up->forward(x_norm, gate_up_.data(), urows, stream_);
      check(cuda::silu_mul(gate_up_.f32(), act_.f32(), rows, inter, stream_), "silu*up");
      l.down->forward(act_.data(), proj, urows, stream_);
    }
    check(cuda::rmsnorm(hidden, proj, final_norm_.data(), LLMK_DTYPE_F32, x_norm, num_logits, h, eps, stream_),
          "rmsnorm");
    weights_.lm_head->forward(x_norm, logits_->data(), static_cast<uint32_t>(num_logits), stream_);
  }

  std::shared_ptr<const Checkpoint> checkpoint_;
  ModelConfig cfg_;
  ModelRuntime rt_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t logits_ready_ = nullptr;   // recorded after the lm_head
  cudaEvent_t meta_uploaded_ = nullptr;  // recorded after the metadata copy

  ModelWeights weights_;  // linear layers on the device; host norms (uploaded below)
  DeviceBuffer embed_;
  llmk_dtype embed_dtype_ = LLMK_DTYPE_F32;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer final_norm_, rope_cos_, rope_sin_;  // rope: [max_seq_len, head_dim / 2]

  std::unique_ptr<AttentionImpl> attention_;
  DeviceBuffer attention_workspace_;
  std::vector<DeviceKvLayer> kv_;
  std::vector<uint64_t> per_slot_;  // bytes per slot of K, V, K scales, V scales
  size_t kv_bytes_ = 0;

  int64_t q_dim_ = 0, kv_dim_ = 0, qkv_dim_ = 0;
  DeviceBuffer hidden_, x_norm_, qkv_, q_, k_, v_, attn_, proj_, gate_up_, act_;  // max_step_tokens rows each
  std::shared_ptr<DeviceBuffer> logits_;  // [max_step_tokens, vocab]; shared with the views handed out

  MetaBuffers eager_meta_;                        // steps that run eagerly
  std::map<int32_t, MetaBuffers> graph_meta_;     // by bucket: what its graphs read
  std::map<std::pair<int32_t, size_t>, Graph> graphs_;  // by (bucket, attention workspace bytes)
  bool graphs_enabled_ = true;
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

}  // namespace llmk
