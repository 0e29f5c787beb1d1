// The Llama forward pass: embedding, then per layer
//   rmsnorm -> qkv (fused linear) [+ q/k/v bias] -> rope -> attention plugin -> o_proj
//   -> residual add + rmsnorm (fused) -> gate_up (fused linear) -> silu*up -> down
// then final norm and lm_head on the logits rows only. The last layer's
// o_proj and MLP also run on the logits rows only: other rows' outputs feed
// nothing (their K/V were written by the attention call).
//
// Weights live in core/model_weights.cpp, the KV memory in core/kv_memory.cpp;
// this file holds the activations and the order of the calls.
//
// In a parallel job (core/parallel.hpp) a rank runs its stage's layers on
// its tensor shard: the vocabulary-parallel embedding and the partial sums
// of o_proj and down_proj are all-reduced over the tensor group, a stage
// receives the residual stream from the one before and sends it on, and the
// last stage gathers the vocabulary slices of the logits and sends them to
// rank 0. Architecture
// differences are data: Qwen2's q/k/v biases (added here after the linear
// plugin's matmul), rope scaling (in the rotary tables, core/rope_scaling.hpp)
// and Mistral's sliding window (passed to the attention plugin).
//
// StreamingLLM (kv_cache.window, sink_tokens): a shifted sequence's cache
// holds its first sink_tokens rows and its newest ones, so a row's position
// in the text (StepBatch::positions) runs ahead of its position in the
// cache. Keys are rotated by their text position once, when written: RoPE
// scores depend only on the distance between query and key, and between a
// query and a key of the window that distance is the same in the text and in
// the cache, so the window's keys never need rotating again. Only the sinks
// sit nearer in the cache than in the text; they are scored with q_sink, the
// query rotated by its cache position (API 3.2). One extra rotation of each
// query row per layer, instead of re-rotating the cache as it shifts.
#include "core/model.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <spdlog/spdlog.h>

#include "core/aligned_buffer.hpp"
#include "core/attention_metadata.hpp"
#include "core/error.hpp"
#include "core/hw_probe.hpp"
#include "core/kv_memory.hpp"
#include "core/model_weights.hpp"
#include "core/rope_scaling.hpp"
#include "kernels/cpu/hadamard.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/silu_mul.hpp"

namespace llmk {

namespace kc = kernels::cpu;

struct Model::Impl {
  std::shared_ptr<const Checkpoint> checkpoint;  // the weights may borrow its tensors
  ModelConfig cfg;
  std::shared_ptr<ParallelJob> job;  // null outside a parallel job
  ModelShard shard;                  // this rank's share (the whole model outside a job)
  ModelConfig local;                 // the model as the shard sees it (local_model_config)
  ModelRuntime rt;
  ModelWeights weights;
  std::unique_ptr<AttentionImpl> attention;
  std::unique_ptr<KvMemory> kv;
  AlignedBuffer attention_workspace;  // grown to the largest plan() so far, between steps
  std::vector<float> rope_cos, rope_sin;  // [max_seq_len, head_dim / 2]
  // StreamingLLM: text positions may pass max_seq_len; such a step's rows
  // take their angles from a table of the step's own (step_cos, step_sin:
  // [rows, head_dim / 2]) indexed by row.
  uint32_t sink_tokens = 0;
  bool streaming = false;
  std::vector<double> inv_freq;
  std::vector<float> step_cos, step_sin, q_sink;
  std::vector<int32_t> step_rows, cache_positions;

  ForwardTimings* timings = nullptr;  // Model::time_forwards
  Model::StageHandover handover;      // Model::set_stage_handover
  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;
  // Activations for max_step_tokens rows.
  std::vector<float> hidden, x_norm, qkv, q, k, v, attn, proj, gate_up, act;
  std::vector<float> head_out, head_gather;  // tensor parallelism: this rank's logits columns, every rank's
  int64_t last_logits = -1;  // rows of x_norm the latest forward final-normed for lm_head (-1: none)

  // hidden_out set: the final-normed rows go there instead of through lm_head.
  void forward(const StepBatch& b, float* logits, float* hidden_out = nullptr);
  // Tensor parallelism: the sum of every rank's partial rows (in place).
  void reduce(float* rows, int64_t count) {
    if (shard.tensor.degree > 1) job->tensor_group().all_reduce(rows, static_cast<size_t>(count));
  }
  void lm_head(int64_t rows, float* logits);
};

Model::Model(std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins, const EngineConfig& ecfg,
             const ModelRuntime& runtime, std::shared_ptr<ParallelJob> job)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.checkpoint = std::move(checkpoint);
  m.cfg = m.checkpoint->config();
  m.rt = runtime;
  m.job = std::move(job);
  m.shard = m.job ? model_shard(m.cfg, m.job->tensor(), m.job->pipeline(), m.job->rank()) : model_shard(m.cfg, 1, 1, 0);
  m.local = local_model_config(m.cfg, m.shard);
  // c: the model as this rank holds it (all of it outside a job).
  const ModelConfig& c = m.local;
  if (c.head_dim % 2 != 0) throw Error(ErrorCode::unsupported, "head_dim must be even for rotary embeddings");
  m.q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  m.kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  m.qkv_dim = m.q_dim + 2 * m.kv_dim;

  omp_set_num_threads(static_cast<int>(m.rt.num_threads));
  m.weights = load_weights(*m.checkpoint, plugins, ecfg, m.rt, LinearPlacement{}, &m.shard);

  const llmk_attention_desc ad = attention_desc(c, m.rt, ecfg, LLMK_DEVICE_CPU);
  m.attention = std::make_unique<AttentionImpl>(plugins.load(ecfg.plugins.attention, LLMK_PLUGIN_ATTENTION), ad);

  // The cache is laid out as the plugin declares; a layout other than the
  // standard one changes how many tokens the configured capacity holds.
  const llmk_kv_layout layout = m.attention->kv_layout();
  // In a job the configured capacity is the job's, every rank holding its
  // share of each slot (the same slot count on every rank).
  const uint64_t ranks = m.job ? static_cast<uint64_t>(m.job->size()) : 1;
  const uint64_t per_token = ranks * static_cast<uint64_t>(c.num_layers) *
                             (layout.k_bytes_per_slot + layout.v_bytes_per_slot + layout.k_scale_bytes_per_slot +
                              layout.v_scale_bytes_per_slot);
  if (per_token != ranks * standard_kv_bytes_per_token(c, m.rt.kv_dtype, m.rt.kv_group_size))
    m.rt.num_kv_slots = kv_slots_for(ecfg, m.rt.max_seq_len, per_token, static_cast<uint64_t>(physical_memory_bytes()));
  m.kv = std::make_unique<KvMemory>(c.num_layers, m.rt, layout);

  const int64_t half = c.head_dim / 2;
  m.rope_cos.resize(static_cast<size_t>(m.rt.max_seq_len) * half);
  m.rope_sin.resize(m.rope_cos.size());
  rope_tables(c, m.rt.max_seq_len, m.rope_cos.data(), m.rope_sin.data());
  m.streaming = ecfg.kv_cache.window > 0;
  m.sink_tokens = m.streaming ? ecfg.kv_cache.sink_tokens : 0;
  if (m.streaming) m.inv_freq = rope_inv_freq(c);

  const size_t t = m.rt.max_step_tokens;
  m.hidden.resize(t * c.hidden_size);
  m.x_norm.resize(t * c.hidden_size);
  m.qkv.resize(t * m.qkv_dim);
  m.q.resize(t * m.q_dim);
  m.k.resize(t * m.kv_dim);
  m.v.resize(t * m.kv_dim);
  m.attn.resize(t * m.q_dim);
  m.proj.resize(t * c.hidden_size);
  m.gate_up.resize(t * 2 * c.intermediate_size);
  m.act.resize(t * c.intermediate_size);
  if (m.sink_tokens > 0) m.q_sink.resize(t * m.q_dim);
  if (m.shard.tensor.degree > 1 && m.shard.last_stage()) {
    m.head_out.resize(t * m.shard.tensor.vocab_chunk);
    m.head_gather.resize(t * m.shard.tensor.vocab_chunk * m.shard.tensor.degree);
  }
  const PluginInfo& ai = m.attention->info();
  const std::string kv_kind =
      std::string(dtype_name(m.rt.kv_dtype)) +
      (m.rt.kv_dtype == DType::i8 ? " group " + std::to_string(m.rt.kv_group_size) : std::string()) +
      (m.rt.key_rotation != 0 ? ", keys Hadamard-rotated (" + std::to_string(m.rt.key_rotation) + ")" : std::string());
  const LinearLayer* any_linear = m.weights.lm_head ? m.weights.lm_head.get() : m.weights.layers[m.shard.layers.first].o.get();
  spdlog::info("model: {} layers, {} threads; linear {} ({}), attention {} {} ({}); KV {} {} slots ({} MiB)",
               c.num_layers, m.rt.num_threads, m.weights.linear_plugins, any_linear->info().file.string(),
               ai.name, ai.version, ai.file.string(), kv_kind, m.rt.num_kv_slots, kv_cache_bytes() >> 20);
  if (m.job)
    spdlog::info("model shard: {}; layers [{}, {}), {} of {} query heads, {} KV heads, MLP columns [{}, {}), "
                 "vocabulary rows [{}, {}); weights {} MiB",
                 m.job->describe(), m.shard.layers.first, m.shard.layers.last, c.num_heads, m.cfg.num_heads,
                 c.num_kv_heads, m.shard.tensor.inter_first, m.shard.tensor.inter_first + m.shard.tensor.inter_count,
                 m.shard.tensor.vocab_first, m.shard.tensor.vocab_first + m.shard.tensor.vocab_count,
                 m.weights.bytes() >> 20);
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const ModelShard& Model::shard() const { return impl_->shard; }
const ModelRuntime& Model::runtime() const { return impl_->rt; }
size_t Model::weight_bytes() const { return impl_->weights.bytes(); }

bool Model::attends_token_trees() const {
  return LLMK_API_VERSION_MINOR(impl_->attention->info().api_version) >= 3;
}
size_t Model::kv_cache_bytes() const { return impl_->kv->bytes(); }

void Model::forward(const StepBatch& batch, float* logits) { impl_->forward(batch, logits); }
void Model::forward_hidden(const StepBatch& batch, float* hidden) {
  if (impl_->shard.stages > 1)
    throw Error(ErrorCode::unsupported, "embeddings: a pipeline-parallel model does not return hidden states yet");
  impl_->forward(batch, nullptr, hidden);
}
bool Model::copy_last_hidden(int32_t num_rows, float* hidden) const {
  const Impl& m = *impl_;
  if (m.shard.stages > 1 || m.shard.tensor.degree > 1 || m.last_logits != num_rows) return false;
  std::memcpy(hidden, m.x_norm.data(), static_cast<size_t>(num_rows) * static_cast<size_t>(m.cfg.hidden_size) * sizeof(float));
  return true;
}
void Model::time_forwards(ForwardTimings* timings) { impl_->timings = timings; }
void Model::set_stage_handover(StageHandover handover) { impl_->handover = std::move(handover); }

std::vector<uint8_t> Model::save_kv(const std::vector<int32_t>& slots) const { return impl_->kv->save(slots); }

void Model::restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) {
  impl_->kv->restore(slots, data);
}

void Model::Impl::forward(const StepBatch& b, float* logits, float* hidden_out) {
  // A streaming sequence's text positions may pass the context length; its
  // cache positions (context_lens) may not, which the plugin checks.
  const uint32_t max_position = streaming ? static_cast<uint32_t>(std::numeric_limits<int32_t>::max()) : rt.max_seq_len;
  validate_step(b, cfg.vocab_size, max_position, rt.max_step_tokens);
  last_logits = -1;
  kv->apply_copies(b.kv_copies);
  const int64_t n = b.num_tokens();
  const int64_t num_logits = b.num_logits();
  if (n == 0) return;
  const int32_t* rope_positions = b.positions.data();
  const float* cos_table = rope_cos.data();
  const float* sin_table = rope_sin.data();
  if (streaming && *std::max_element(b.positions.begin(), b.positions.end()) >= static_cast<int32_t>(rt.max_seq_len)) {
    const int64_t half = cfg.head_dim / 2;
    step_cos.resize(static_cast<size_t>(n * half));
    step_sin.resize(step_cos.size());
    step_rows.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      step_rows[t] = static_cast<int32_t>(t);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(b.positions[t]) * inv_freq[static_cast<size_t>(i)];
        step_cos[t * half + i] = static_cast<float>(std::cos(angle));
        step_sin[t * half + i] = static_cast<float>(std::sin(angle));
      }
    }
    rope_positions = step_rows.data();
    cos_table = step_cos.data();
    sin_table = step_sin.data();
  }
  // Rows whose cache position differs from their text position need q_sink.
  bool shifted = false;
  if (sink_tokens > 0) {
    cache_positions.resize(static_cast<size_t>(n));
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t begin = b.query_start[s], end = b.query_start[s + 1];
      for (int32_t t = begin; t < end; ++t) {
        cache_positions[t] = b.context_lens[s] - (end - t);
        shifted = shifted || cache_positions[t] != b.positions[t];
      }
    }
  }
  omp_set_num_threads(static_cast<int>(rt.num_threads));
  const int64_t h = cfg.hidden_size, inter = local.intermediate_size, hd = cfg.head_dim;
  const float eps = cfg.rms_norm_eps;
  ForwardLaps laps(timings);
  if (shard.first_stage()) {
    embed_rows(*weights.embed, b.token_ids.data(), n, hidden.data(), weights.embed_first);
    reduce(hidden.data(), n * h);  // each tensor rank embedded its vocabulary rows
  } else {
    // The residual stream of every row, from this tensor rank's peer in the stage before.
    job->world().recv(hidden.data(), static_cast<size_t>(n * h), DType::f32,
                      job->world_rank(shard.stage - 1, shard.tensor.rank));
  }

  // The attention plugin plans the step once: every layer runs that plan.
  const llmk_attention_step step = attention_step(b, rt.num_kv_slots);
  const size_t workspace_bytes = attention->plan(step);
  if (workspace_bytes > attention_workspace.bytes())
    attention_workspace = AlignedBuffer(workspace_bytes, "the attention workspace");

  const int32_t num_layers = cfg.num_layers;
  for (int32_t li = shard.layers.first; li < shard.layers.last; ++li) {
    LayerWeights& l = weights.layers[li];
    // proj holds the previous layer's MLP output: fold it into the residual.
    if (li == shard.layers.first) kc::rmsnorm(hidden.data(), l.input_norm.data(), x_norm.data(), n, h, eps);
    else kc::add_rmsnorm(hidden.data(), proj.data(), l.input_norm.data(), x_norm.data(), n, h, eps);

    laps.lap(ForwardOp::other);
    l.qkv->forward(x_norm.data(), qkv.data(), static_cast<uint32_t>(n));
    if (!l.qkv_bias.empty()) {
      const float* bias = l.qkv_bias.data();  // [qkv_dim]
      for (int64_t t = 0; t < n; ++t) {
        float* row = qkv.data() + t * qkv_dim;
        for (int64_t j = 0; j < qkv_dim; ++j) row[j] += bias[j];
      }
    }
    laps.lap(ForwardOp::qkv);
    kc::rope(qkv.data(), qkv_dim, q.data(), q_dim, n, local.num_heads, hd, rope_positions, cos_table, sin_table);
    kc::rope(qkv.data() + q_dim, qkv_dim, k.data(), kv_dim, n, local.num_kv_heads, hd, rope_positions, cos_table,
             sin_table);
    if (shifted)  // cache positions are below max_seq_len: the model's table serves them
      kc::rope(qkv.data(), qkv_dim, q_sink.data(), q_dim, n, local.num_heads, hd, cache_positions.data(),
               rope_cos.data(), rope_sin.data());
    if (rt.key_rotation != 0) {
      // An int8 cache holds rotated keys; rotated queries give the same scores.
      kc::hadamard_blocks(q.data(), n * q_dim, rt.key_rotation);
      kc::hadamard_blocks(k.data(), n * kv_dim, rt.key_rotation);
      if (shifted) kc::hadamard_blocks(q_sink.data(), n * q_dim, rt.key_rotation);
    }
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(v.data() + t * kv_dim, qkv.data() + t * qkv_dim + q_dim + kv_dim, static_cast<size_t>(kv_dim) * 4);

    llmk_attention_layer a{};
    a.struct_size = sizeof(a);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = attn.data();
    a.kv = kv->layer(li - shard.layers.first);
    a.q_sink = shifted ? q_sink.data() : nullptr;
    laps.lap(ForwardOp::rope_cache);
    attention->run(a, attention_workspace.data(), attention_workspace.bytes());
    laps.lap(ForwardOp::attention);

    int64_t rows = n;
    if (li == num_layers - 1) {
      // Only the logits rows go on: gather them (in logits order) to the front.
      for (int64_t i = 0; i < num_logits; ++i) {
        const int64_t r = b.logits_rows[i];
        std::memcpy(q.data() + i * q_dim, attn.data() + r * q_dim, static_cast<size_t>(q_dim) * 4);
        std::memcpy(x_norm.data() + i * h, hidden.data() + r * h, static_cast<size_t>(h) * 4);
      }
      std::memcpy(attn.data(), q.data(), static_cast<size_t>(num_logits * q_dim) * 4);
      std::memcpy(hidden.data(), x_norm.data(), static_cast<size_t>(num_logits * h) * 4);
      rows = num_logits;
      if (rows == 0) return;
    }
    const auto urows = static_cast<uint32_t>(rows);
    laps.lap(ForwardOp::other);
    l.o->forward(attn.data(), proj.data(), urows);
    reduce(proj.data(), rows * h);
    laps.lap(ForwardOp::o_proj);
    kc::add_rmsnorm(hidden.data(), proj.data(), l.post_norm.data(), x_norm.data(), rows, h, eps);
    laps.lap(ForwardOp::other);
    l.gate_up->forward(x_norm.data(), gate_up.data(), urows);
    laps.lap(ForwardOp::gate_up);
    kc::silu_mul(gate_up.data(), act.data(), rows, inter);
    laps.lap(ForwardOp::other);
    l.down->forward(act.data(), proj.data(), urows);
    reduce(proj.data(), rows * h);
    laps.lap(ForwardOp::down);
  }
  if (!shard.last_stage()) {
    // The residual stream goes on to the next stage, the last MLP output folded in.
    for (int64_t i = 0; i < n * h; ++i) hidden[i] += proj[i];
    if (handover) {
      handover(hidden.data(), static_cast<size_t>(n * h));
      laps.lap(ForwardOp::other);
      return;
    }
    job->world().send(hidden.data(), static_cast<size_t>(n * h), DType::f32,
                      job->world_rank(shard.stage + 1, shard.tensor.rank));
    // Rank 0 (the first stage's) receives the logits from the last stage.
    if (job->rank() == 0 && num_logits > 0)
      job->world().recv(logits, static_cast<size_t>(num_logits * cfg.vocab_size), DType::f32,
                        job->world_rank(shard.stages - 1, 0));
    laps.lap(ForwardOp::other);
    return;
  }
  kc::add_rmsnorm(hidden.data(), proj.data(), weights.final_norm.data(), x_norm.data(), num_logits, h, eps);
  laps.lap(ForwardOp::other);
  if (hidden_out) {
    std::memcpy(hidden_out, x_norm.data(), static_cast<size_t>(num_logits * h) * sizeof(float));
    return;
  }
  last_logits = num_logits;
  lm_head(num_logits, logits);
  laps.lap(ForwardOp::lm_head);
}

void Model::Impl::lm_head(int64_t rows, float* logits) {
  const auto urows = static_cast<uint32_t>(rows);
  const TensorShard& ts = shard.tensor;
  if (ts.degree == 1 && shard.stages == 1) {
    weights.lm_head->forward(x_norm.data(), logits, urows);
    return;
  }
  // This tensor rank's vocabulary columns, padded to the chunk every rank sends.
  const int64_t vocab = cfg.vocab_size, chunk = ts.vocab_chunk;
  const bool gatherer = ts.rank == 0;  // of the last stage
  const bool to_rank0 = gatherer && job->rank() != 0;
  std::vector<float> assembled;
  float* out = logits;
  if (to_rank0) {
    assembled.resize(static_cast<size_t>(rows * vocab));
    out = assembled.data();
  }
  if (ts.degree == 1) {
    weights.lm_head->forward(x_norm.data(), out, urows);
  } else {
    float* mine = head_out.data();
    weights.lm_head->forward(x_norm.data(), mine, urows);
    if (ts.vocab_count < chunk) {
      // Spread rows [rows, count] to [rows, chunk] from the back, zero padding.
      for (int64_t i = rows - 1; i >= 0; --i) {
        std::memmove(mine + i * chunk, mine + i * ts.vocab_count, static_cast<size_t>(ts.vocab_count) * 4);
        std::fill(mine + i * chunk + ts.vocab_count, mine + (i + 1) * chunk, 0.0f);
      }
    }
    job->tensor_group().all_gather(mine, head_gather.data(), static_cast<size_t>(rows * chunk), DType::f32);
    if (gatherer) {
      for (int32_t r = 0; r < ts.degree; ++r) {
        const int64_t first = r * chunk, count = std::min(chunk, vocab - first);
        const float* part = head_gather.data() + static_cast<int64_t>(r) * rows * chunk;
        for (int64_t i = 0; i < rows; ++i)
          std::memcpy(out + i * vocab + first, part + i * chunk, static_cast<size_t>(count) * 4);
      }
    }
  }
  if (to_rank0) job->world().send(out, static_cast<size_t>(rows * vocab), DType::f32, 0);
}

}  // namespace llmk
