// The Llama forward pass: embedding, then per layer
//   rmsnorm -> qkv (fused linear) -> rope -> attention plugin -> o_proj
//   -> residual add + rmsnorm (fused) -> gate_up (fused linear) -> silu*up -> down
// then final norm and lm_head on the logits rows only. The last layer's
// o_proj and MLP also run on the logits rows only: other rows' outputs feed
// nothing (their K/V were written by the attention call).
#include "core/model.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/hadamard.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/silu_mul.hpp"

namespace llmk {

namespace {

namespace kc = kernels::cpu;

// 64-byte aligned, uninitialized storage: KV caches are large and written
// before they are read, so pages are committed on first touch only.
struct AlignedBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) : bytes(n) {
    if (n == 0) return;
    data = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (data == nullptr) throw Error(ErrorCode::internal, "cannot allocate " + std::to_string(n) + " bytes of KV cache");
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data(o.data), bytes(o.bytes) { o.data = nullptr, o.bytes = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data, o.data);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~AlignedBuffer() { std::free(data); }
};

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

}  // namespace

struct Model::Impl {
  struct Layer {
    std::vector<float> input_norm, post_norm;  // [hidden]
    std::unique_ptr<LinearImpl> qkv, o, gate_up, down;
    AlignedBuffer k, v, k_scale, v_scale;  // [num_slots, kv_heads, head_dim] (+ [.., head_dim / group] scales for I8)
  };

  std::shared_ptr<const Checkpoint> checkpoint;
  ModelConfig cfg;
  ModelRuntime rt;
  std::vector<Layer> layers;
  std::vector<float> final_norm;  // [hidden]
  std::unique_ptr<LinearImpl> lm_head;
  std::unique_ptr<AttentionImpl> attention;
  const TensorView* embed = nullptr;
  std::vector<float> rope_cos, rope_sin;  // [max_seq_len, head_dim / 2]

  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;
  // Scratch for max_step_tokens rows.
  std::vector<float> hidden, x_norm, qkv, q, k, v, attn, proj, gate_up, act;

  void build_linears(PluginRegistry& plugins, const EngineConfig& ecfg);
  void forward(const StepBatch& b, float* logits);
  void validate(const StepBatch& b) const;
  void apply_kv_copies(const std::vector<llmk_kv_copy>& copies);
  llmk_kv_layer kv_layer(Layer& l) const {
    return {l.k.data, l.v.data, static_cast<float*>(l.k_scale.data), static_cast<float*>(l.v_scale.data), rt.num_kv_slots};
  }
  int64_t kv_row_bytes() const {  // one slot's K (or V) in one layer
    return kv_dim * static_cast<int64_t>(dtype_size(rt.kv_dtype));
  }
  int64_t kv_scale_row_bytes() const { return rt.kv_dtype == DType::i8 ? kv_dim / rt.kv_group_size * 4 : 0; }
};

namespace {

// Writes every page of the buffer (from all threads: the kernel clears pages
// at about the speed of one core each).
void prefault(AlignedBuffer& buf, uint32_t num_threads) {
  if (buf.data == nullptr) return;
  constexpr size_t kChunk = size_t{1} << 21;
  const auto chunks = static_cast<int64_t>((buf.bytes + kChunk - 1) / kChunk);
#pragma omp parallel for num_threads(static_cast<int>(num_threads))
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t at = static_cast<size_t>(c) * kChunk;
    std::memset(static_cast<uint8_t*>(buf.data) + at, 0, std::min(kChunk, buf.bytes - at));
  }
}

// The rows of several [out_i, in] tensors stacked into one [sum out_i, in] weight.
std::vector<uint8_t> stack_weights(const std::vector<const TensorView*>& parts) {
  size_t total = 0;
  for (const TensorView* t : parts) total += t->nbytes();
  std::vector<uint8_t> out(total);
  size_t off = 0;
  for (const TensorView* t : parts) {
    std::memcpy(out.data() + off, t->data, t->nbytes());
    off += t->nbytes();
  }
  return out;
}

}  // namespace

void Model::Impl::build_linears(PluginRegistry& plugins, const EngineConfig& ecfg) {
  Plugin linear_plugin = plugins.load(ecfg.plugins.linear, LLMK_PLUGIN_LINEAR);
  const std::string& options = ecfg.plugins.linear_options;
  auto make = [&](const std::string& name, const void* weight, DType dtype, int64_t out, int64_t in, bool outlives,
                  uint32_t max_rows) {
    llmk_linear_desc d{};
    d.struct_size = sizeof(d);
    d.name = name.c_str();
    d.in_features = static_cast<uint32_t>(in);
    d.out_features = static_cast<uint32_t>(out);
    d.weight_dtype = static_cast<uint32_t>(dtype);
    d.weight = weight;
    d.weight_outlives = outlives ? 1 : 0;
    d.max_rows = max_rows;
    d.num_threads = rt.num_threads;
    d.options = options.c_str();
    return std::make_unique<LinearImpl>(linear_plugin, d);
  };
  const int64_t h = cfg.hidden_size, inter = cfg.intermediate_size;
  for (int32_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& l = layers[i];
    const TensorView& wq = checkpoint->tensor(p + "self_attn.q_proj.weight");
    const TensorView& wk = checkpoint->tensor(p + "self_attn.k_proj.weight");
    const TensorView& wv = checkpoint->tensor(p + "self_attn.v_proj.weight");
    const TensorView& wo = checkpoint->tensor(p + "self_attn.o_proj.weight");
    const TensorView& wg = checkpoint->tensor(p + "mlp.gate_proj.weight");
    const TensorView& wu = checkpoint->tensor(p + "mlp.up_proj.weight");
    const TensorView& wd = checkpoint->tensor(p + "mlp.down_proj.weight");
    for (const TensorView* t : {&wk, &wv, &wo, &wg, &wu, &wd})
      if (t->dtype != wq.dtype)
        throw Error(ErrorCode::unsupported, "tensor " + t->name + " is " + dtype_name(t->dtype) + " but " + wq.name +
                                                " is " + dtype_name(wq.dtype) + ": mixed dtypes in a layer");
    // Fused weights live only until the plugin has taken what it needs.
    {
      const std::vector<uint8_t> fused = stack_weights({&wq, &wk, &wv});
      l.qkv = make(p + "self_attn.qkv_proj", fused.data(), wq.dtype, qkv_dim, h, false, rt.max_step_tokens);
    }
    l.o = make(p + "self_attn.o_proj", wo.data, wo.dtype, h, q_dim, true, rt.max_step_tokens);
    {
      const std::vector<uint8_t> fused = stack_weights({&wg, &wu});
      l.gate_up = make(p + "mlp.gate_up_proj", fused.data(), wg.dtype, 2 * inter, h, false, rt.max_step_tokens);
    }
    l.down = make(p + "mlp.down_proj", wd.data, wd.dtype, h, inter, true, rt.max_step_tokens);
  }
  const TensorView& head = cfg.tie_word_embeddings && !checkpoint->has("lm_head.weight")
                               ? checkpoint->tensor("model.embed_tokens.weight")
                               : checkpoint->tensor("lm_head.weight");
  lm_head = make("lm_head", head.data, head.dtype, cfg.vocab_size, h, true, rt.max_step_tokens);
}

Model::Model(std::shared_ptr<const Checkpoint> checkpoint, PluginRegistry& plugins, const EngineConfig& ecfg,
             const ModelRuntime& runtime)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.checkpoint = std::move(checkpoint);
  m.cfg = m.checkpoint->config();
  m.rt = runtime;
  const ModelConfig& c = m.cfg;
  if (c.sliding_window && static_cast<uint32_t>(*c.sliding_window) < m.rt.max_seq_len)
    throw Error(ErrorCode::unsupported, "sliding_window attention (" + std::to_string(*c.sliding_window) +
                                            ") shorter than the context (" + std::to_string(m.rt.max_seq_len) +
                                            ") is not implemented");
  if (c.head_dim % 2 != 0) throw Error(ErrorCode::unsupported, "head_dim must be even for rotary embeddings");
  m.q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  m.kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  m.qkv_dim = m.q_dim + 2 * m.kv_dim;
  m.layers.resize(c.num_layers);

  omp_set_num_threads(static_cast<int>(m.rt.num_threads));
  m.build_linears(plugins, ecfg);

  llmk_attention_desc ad{};
  ad.struct_size = sizeof(ad);
  ad.num_heads = static_cast<uint32_t>(c.num_heads);
  ad.num_kv_heads = static_cast<uint32_t>(c.num_kv_heads);
  ad.head_dim = static_cast<uint32_t>(c.head_dim);
  ad.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  ad.kv_dtype = static_cast<uint32_t>(m.rt.kv_dtype);
  ad.kv_group_size = m.rt.kv_group_size;
  ad.max_context = m.rt.max_seq_len;
  ad.max_tokens = m.rt.max_step_tokens;
  ad.num_threads = m.rt.num_threads;
  ad.options = ecfg.plugins.attention_options.c_str();
  m.attention = std::make_unique<AttentionImpl>(plugins.load(ecfg.plugins.attention, LLMK_PLUGIN_ATTENTION), ad);

  for (int32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Impl::Layer& l = m.layers[i];
    l.input_norm = to_f32(m.checkpoint->tensor(p + "input_layernorm.weight"));
    l.post_norm = to_f32(m.checkpoint->tensor(p + "post_attention_layernorm.weight"));
    const size_t rows = static_cast<size_t>(m.rt.num_kv_slots);
    l.k = AlignedBuffer(rows * m.kv_row_bytes());
    l.v = AlignedBuffer(rows * m.kv_row_bytes());
    if (m.rt.kv_dtype == DType::i8) {
      l.k_scale = AlignedBuffer(rows * m.kv_scale_row_bytes());
      l.v_scale = AlignedBuffer(rows * m.kv_scale_row_bytes());
    }
    if (m.rt.prefault_kv)
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) prefault(*buf, m.rt.num_threads);
  }
  m.final_norm = to_f32(m.checkpoint->tensor("model.norm.weight"));
  m.embed = &m.checkpoint->tensor("model.embed_tokens.weight");
  if (m.embed->dtype != DType::f32 && m.embed->dtype != DType::f16 && m.embed->dtype != DType::bf16)
    throw Error(ErrorCode::unsupported, "model.embed_tokens.weight has dtype " + std::string(dtype_name(m.embed->dtype)));

  const int64_t half = c.head_dim / 2;
  m.rope_cos.resize(static_cast<size_t>(m.rt.max_seq_len) * half);
  m.rope_sin.resize(m.rope_cos.size());
  kc::rope_tables(c.rope_theta, c.head_dim, m.rt.max_seq_len, m.rope_cos.data(), m.rope_sin.data());

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
  const PluginInfo& li = m.lm_head->info();
  const PluginInfo& ai = m.attention->info();
  const std::string kv_kind =
      std::string(dtype_name(m.rt.kv_dtype)) +
      (m.rt.kv_dtype == DType::i8 ? " group " + std::to_string(m.rt.kv_group_size) : std::string()) +
      (m.rt.key_rotation != 0 ? ", keys Hadamard-rotated (" + std::to_string(m.rt.key_rotation) + ")" : std::string());
  spdlog::info("model: {} layers, {} threads; linear {} {} ({}), attention {} {} ({}); KV {} {} slots ({} MiB)",
               c.num_layers, m.rt.num_threads, li.name, li.version, li.file.string(), ai.name, ai.version,
               ai.file.string(), kv_kind, m.rt.num_kv_slots, kv_cache_bytes() >> 20);
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
const ModelRuntime& Model::runtime() const { return impl_->rt; }

size_t Model::weight_bytes() const {
  const Impl& m = *impl_;
  size_t total = m.embed->nbytes() + m.final_norm.size() * 4;
  for (const auto& l : m.layers)
    total += l.qkv->weight_bytes() + l.o->weight_bytes() + l.gate_up->weight_bytes() + l.down->weight_bytes() +
             (l.input_norm.size() + l.post_norm.size()) * 4;
  // A tied head shares the embedding's bytes when borrowed; count what the plugin reports.
  total += m.lm_head->weight_bytes();
  return total;
}

size_t Model::kv_cache_bytes() const {
  const Impl& m = *impl_;
  size_t total = 0;
  for (const auto& l : m.layers) total += l.k.bytes + l.v.bytes + l.k_scale.bytes + l.v_scale.bytes;
  return total;
}

void Model::forward(const StepBatch& batch, float* logits) { impl_->forward(batch, logits); }

void Model::Impl::validate(const StepBatch& b) const {
  const int32_t n = b.num_tokens();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "step batch: " + what); };
  if (n > static_cast<int32_t>(rt.max_step_tokens))
    bad(std::to_string(n) + " tokens exceed max_step_tokens " + std::to_string(rt.max_step_tokens));
  if (b.positions.size() != static_cast<size_t>(n) || b.slot_mapping.size() != static_cast<size_t>(n))
    bad("positions and slot_mapping must have one entry per token");
  if (b.query_start.size() != static_cast<size_t>(b.num_seqs()) + 1 || b.query_start.front() != 0 ||
      b.query_start.back() != n)
    bad("query_start must have num_seqs + 1 entries from 0 to num_tokens");
  if (b.block_tables.size() != static_cast<size_t>(b.num_seqs()) * b.max_blocks_per_seq || b.block_size <= 0)
    bad("block_tables must be [num_seqs, max_blocks_per_seq] with a positive block_size");
  for (int32_t i = 0; i < n; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= cfg.vocab_size)
      bad("token id " + std::to_string(b.token_ids[i]) + " outside the vocabulary of " + std::to_string(cfg.vocab_size));
    if (b.positions[i] < 0 || b.positions[i] >= static_cast<int32_t>(rt.max_seq_len))
      bad("position " + std::to_string(b.positions[i]) + " outside [0, " + std::to_string(rt.max_seq_len) + ")");
  }
  // A row may appear more than once (n > 1 samples of one prompt share its
  // last row); the count is bounded by the scratch rows.
  if (b.num_logits() > static_cast<int32_t>(rt.max_step_tokens))
    bad(std::to_string(b.num_logits()) + " logits rows exceed max_step_tokens " + std::to_string(rt.max_step_tokens));
  for (int32_t r : b.logits_rows)
    if (r < 0 || r >= n) bad("logits row " + std::to_string(r) + " outside [0, " + std::to_string(n) + ")");
}

void Model::Impl::apply_kv_copies(const std::vector<llmk_kv_copy>& copies) {
  for (const llmk_kv_copy& c : copies) {
    if (c.src_slot < 0 || c.dst_slot < 0 || c.num_slots < 0 ||
        static_cast<int64_t>(std::max(c.src_slot, c.dst_slot)) + c.num_slots > rt.num_kv_slots)
      throw Error(ErrorCode::invalid_argument, "kv copy outside the cache");
    for (Layer& l : layers) {
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data == nullptr) continue;
        const size_t row = buf->bytes / rt.num_kv_slots;
        auto* base = static_cast<uint8_t*>(buf->data);
        std::memmove(base + c.dst_slot * row, base + c.src_slot * row, static_cast<size_t>(c.num_slots) * row);
      }
    }
  }
}

void Model::Impl::forward(const StepBatch& b, float* logits) {
  validate(b);
  apply_kv_copies(b.kv_copies);
  const int64_t n = b.num_tokens();
  const int64_t num_logits = b.num_logits();
  if (n == 0) return;
  omp_set_num_threads(static_cast<int>(rt.num_threads));
  const int64_t h = cfg.hidden_size, inter = cfg.intermediate_size, hd = cfg.head_dim;
  const float eps = cfg.rms_norm_eps;
  kc::embedding(embed->data, static_cast<llmk_dtype>(embed->dtype), h, b.token_ids.data(), n, hidden.data());

  const int32_t num_layers = cfg.num_layers;
  for (int32_t li = 0; li < num_layers; ++li) {
    Layer& l = layers[li];
    // proj holds the previous layer's MLP output: fold it into the residual.
    if (li == 0) kc::rmsnorm(hidden.data(), l.input_norm.data(), x_norm.data(), n, h, eps);
    else kc::add_rmsnorm(hidden.data(), proj.data(), l.input_norm.data(), x_norm.data(), n, h, eps);

    l.qkv->forward(x_norm.data(), qkv.data(), static_cast<uint32_t>(n));
    kc::rope(qkv.data(), qkv_dim, q.data(), q_dim, n, cfg.num_heads, hd, b.positions.data(), rope_cos.data(), rope_sin.data());
    kc::rope(qkv.data() + q_dim, qkv_dim, k.data(), kv_dim, n, cfg.num_kv_heads, hd, b.positions.data(), rope_cos.data(),
             rope_sin.data());
    if (rt.key_rotation != 0) {
      // An int8 cache holds rotated keys; rotated queries give the same scores.
      kc::hadamard_blocks(q.data(), n * q_dim, rt.key_rotation);
      kc::hadamard_blocks(k.data(), n * kv_dim, rt.key_rotation);
    }
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(v.data() + t * kv_dim, qkv.data() + t * qkv_dim + q_dim + kv_dim, static_cast<size_t>(kv_dim) * 4);

    llmk_attention_args a{};
    a.struct_size = sizeof(a);
    a.num_tokens = static_cast<uint32_t>(n);
    a.num_seqs = static_cast<uint32_t>(b.num_seqs());
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = attn.data();
    a.query_start = b.query_start.data();
    a.context_lens = b.context_lens.data();
    a.slot_mapping = b.slot_mapping.data();
    a.block_tables = b.block_tables.data();
    a.max_blocks_per_seq = static_cast<uint32_t>(b.max_blocks_per_seq);
    a.block_size = static_cast<uint32_t>(b.block_size);
    a.kv = kv_layer(l);
    attention->forward(a);

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
    l.o->forward(attn.data(), proj.data(), urows);
    kc::add_rmsnorm(hidden.data(), proj.data(), l.post_norm.data(), x_norm.data(), rows, h, eps);
    l.gate_up->forward(x_norm.data(), gate_up.data(), urows);
    kc::silu_mul(gate_up.data(), act.data(), rows, inter);
    l.down->forward(act.data(), proj.data(), urows);
  }
  kc::add_rmsnorm(hidden.data(), proj.data(), final_norm.data(), x_norm.data(), num_logits, h, eps);
  lm_head->forward(x_norm.data(), logits, static_cast<uint32_t>(num_logits));
}

std::vector<uint8_t> Model::save_kv(const std::vector<int32_t>& slots) const {
  const Impl& m = *impl_;
  const size_t row = static_cast<size_t>(m.kv_row_bytes()), srow = static_cast<size_t>(m.kv_scale_row_bytes());
  std::vector<uint8_t> out(slots.size() * m.layers.size() * 2 * (row + srow));
  uint8_t* dst = out.data();
  for (const auto& l : m.layers)
    for (int32_t s : slots) {
      if (s < 0 || static_cast<uint32_t>(s) >= m.rt.num_kv_slots)
        throw Error(ErrorCode::invalid_argument, "save_kv: slot " + std::to_string(s) + " outside the cache");
      for (const AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data == nullptr) continue;
        const size_t r = buf->bytes / m.rt.num_kv_slots;
        std::memcpy(dst, static_cast<const uint8_t*>(buf->data) + static_cast<size_t>(s) * r, r);
        dst += r;
      }
    }
  return out;
}

void Model::restore_kv(const std::vector<int32_t>& slots, const std::vector<uint8_t>& data) {
  Impl& m = *impl_;
  const size_t row = static_cast<size_t>(m.kv_row_bytes()), srow = static_cast<size_t>(m.kv_scale_row_bytes());
  if (data.size() != slots.size() * m.layers.size() * 2 * (row + srow))
    throw Error(ErrorCode::invalid_argument, "restore_kv: " + std::to_string(data.size()) + " bytes do not hold " +
                                                 std::to_string(slots.size()) + " slots");
  const uint8_t* src = data.data();
  for (auto& l : m.layers)
    for (int32_t s : slots) {
      if (s < 0 || static_cast<uint32_t>(s) >= m.rt.num_kv_slots)
        throw Error(ErrorCode::invalid_argument, "restore_kv: slot " + std::to_string(s) + " outside the cache");
      for (AlignedBuffer* buf : {&l.k, &l.v, &l.k_scale, &l.v_scale}) {
        if (buf->data == nullptr) continue;
        const size_t r = buf->bytes / m.rt.num_kv_slots;
        std::memcpy(static_cast<uint8_t*>(buf->data) + static_cast<size_t>(s) * r, src, r);
        src += r;
      }
    }
}

}  // namespace llmk
