#include "core/cuda/cuda_forward.hpp"

#include <vector>

#include "core/rope_scaling.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/hadamard.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/rows.hpp"
#include "kernels/cuda/silu_mul.hpp"

namespace llmk {

CudaActivations::CudaActivations(const ModelConfig& c, const ModelRuntime& rt, uint32_t window, uint32_t sink_tokens) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> cos_table(static_cast<size_t>(rt.max_seq_len) * half), sin_table(cos_table.size());
  rope_tables(c, rt.max_seq_len, cos_table.data(), sin_table.data());
  rope_cos = upload(cos_table, "the rotary tables");
  rope_sin = upload(sin_table, "the rotary tables");
  if (window > 0) {
    const std::vector<double> freq = rope_inv_freq(c);
    inv_freq = upload(freq.data(), freq.size() * sizeof(double), "the rotary frequencies");
  }

  q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  qkv_dim = q_dim + 2 * kv_dim;
  const size_t t = rt.max_step_tokens, f = sizeof(float);
  hidden = device_buffer(t * c.hidden_size * f, "activations");
  x_norm = device_buffer(t * c.hidden_size * f, "activations");
  qkv = device_buffer(t * qkv_dim * f, "activations");
  q = device_buffer(t * q_dim * f, "activations");
  k = device_buffer(t * kv_dim * f, "activations");
  v = device_buffer(t * kv_dim * f, "activations");
  attn = device_buffer(t * q_dim * f, "activations");
  proj = device_buffer(t * c.hidden_size * f, "activations");
  gate_up = device_buffer(t * 2 * c.intermediate_size * f, "activations");
  act = device_buffer(t * c.intermediate_size * f, "activations");
  if (window > 0 && sink_tokens > 0) q_sink = device_buffer(t * q_dim * f, "activations");
  logits = std::make_shared<cuda::DeviceBuffer>(device_buffer(t * static_cast<size_t>(c.vocab_size) * f, "the logits"));
}

void enqueue_forward(const CudaForward& f, const StepBatch& b, const MetaBuffers& m) {
  const ModelConfig& c = f.model;
  CudaActivations& a = f.act;
  const cudaStream_t stream = f.stream;
  const int64_t n = b.num_tokens(), num_logits = b.num_logits(), h = c.hidden_size;
  const int64_t inter = c.intermediate_size, hd = c.head_dim;
  const int64_t q_dim = a.q_dim, kv_dim = a.kv_dim, qkv_dim = a.qkv_dim;
  const float eps = c.rms_norm_eps;
  float* hidden = a.hidden.f32();
  float* x_norm = a.x_norm.f32();
  float* qkv = a.qkv.f32();
  float* proj = a.proj.f32();
  float* attn = a.attn.f32();
  float* q = a.q.f32();
  float* q_sink = a.q_sink.bytes() != 0 ? a.q_sink.f32() : nullptr;  // with attention sinks

  CudaTensorParallel* tp = f.tensor_parallel;
  if (tp != nullptr) {
    // Each rank embeds the ids of its vocabulary rows and zeros for the others'.
    check_cuda(cudaMemsetAsync(hidden, 0, static_cast<size_t>(n * h) * sizeof(float), stream), "embedding");
    check_cuda(cuda::embedding(f.weights.embed.data(), f.weights.embed_dtype, tp->shard().vocab_count, h,
                               m.at(m.layout.token_ids), n, hidden, nullptr, stream),
               "embedding");
    tp->all_reduce(hidden, n * h, stream);
  } else {
    check_cuda(cuda::embedding(f.weights.embed.data(), f.weights.embed_dtype, c.vocab_size, h,
                               m.at(m.layout.token_ids), n, hidden, nullptr, stream),
               "embedding");
  }

  for (int32_t li = 0; li < c.num_layers; ++li) {
    LayerWeights& l = f.weights.host.layers[li];
    const CudaLayerWeights& dl = f.weights.layers[li];
    // proj holds the previous layer's MLP output: fold it into the residual.
    check_cuda(cuda::rmsnorm(hidden, li == 0 ? nullptr : proj, dl.input_norm.data(), cuda::DType::f32, x_norm, n, h,
                             eps, stream),
               "rmsnorm");
    l.qkv->forward(x_norm, qkv, static_cast<uint32_t>(n), stream);
    if (dl.qkv_bias.bytes() != 0)
      check_cuda(cuda::add_bias_rows(qkv, qkv_dim, dl.qkv_bias.f32(), static_cast<int32_t>(n),
                                     static_cast<int32_t>(qkv_dim), stream),
                 "q/k/v bias");
    if (q_sink != nullptr) {  // q before its rotation, rotated by its cache position
      check_cuda(cuda::copy_rows(qkv, qkv_dim, q_sink, q_dim, static_cast<int32_t>(n), static_cast<int32_t>(q_dim),
                                 stream),
                 "copying q for the sinks");
      check_cuda(cuda::rope(q_sink, q_dim, c.num_heads, nullptr, 0, 0, n, hd, m.at(m.layout.cache_positions),
                            a.rope_cos.f32(), a.rope_sin.f32(), stream),
                 "rope for the sinks");
    }
    // Text positions may pass the tables under a streaming window.
    check_cuda(cuda::rope(qkv, qkv_dim, c.num_heads, qkv + q_dim, qkv_dim, c.num_kv_heads, n, hd,
                          m.at(m.layout.positions), a.rope_cos.f32(), a.rope_sin.f32(), f.rt.max_seq_len,
                          a.inv_freq.bytes() != 0 ? a.inv_freq.as<const double>() : nullptr, stream),
               "rope");
    check_cuda(cuda::copy_rows(qkv, qkv_dim, q, q_dim, static_cast<int32_t>(n), static_cast<int32_t>(q_dim), stream),
               "splitting q");
    check_cuda(cuda::copy_rows(qkv + q_dim, qkv_dim, a.k.f32(), kv_dim, static_cast<int32_t>(n),
                               static_cast<int32_t>(kv_dim), stream),
               "splitting k");
    check_cuda(cuda::copy_rows(qkv + q_dim + kv_dim, qkv_dim, a.v.f32(), kv_dim, static_cast<int32_t>(n),
                               static_cast<int32_t>(kv_dim), stream),
               "splitting v");

    if (f.rt.key_rotation != 0) {
      // An int8 cache holds rotated keys; rotated queries give the same scores.
      check_cuda(cuda::hadamard_blocks(q, n * q_dim, f.rt.key_rotation, stream), "rotating q");
      check_cuda(cuda::hadamard_blocks(a.k.f32(), n * kv_dim, f.rt.key_rotation, stream), "rotating k");
      if (q_sink != nullptr)
        check_cuda(cuda::hadamard_blocks(q_sink, n * q_dim, f.rt.key_rotation, stream), "rotating q for the sinks");
    }

    llmk_attention_layer al{};
    al.struct_size = sizeof(al);
    al.q = a.q.data();
    al.k = a.k.data();
    al.v = a.v.data();
    al.out = attn;
    al.kv = f.kv.layer(li);
    al.q_sink = q_sink;
    f.attention.run(al, f.attention_workspace.data(), f.attention_workspace.bytes(), stream);

    int64_t rows = n;
    if (li == c.num_layers - 1) {
      // Only the logits rows go on: gather them (in logits order) to the front.
      if (num_logits == 0) return;
      check_cuda(cuda::gather_rows(attn, m.at(m.layout.logits_rows), q, static_cast<int32_t>(num_logits),
                                   static_cast<int32_t>(q_dim), stream),
                 "gathering the logits rows");
      check_cuda(cuda::gather_rows(hidden, m.at(m.layout.logits_rows), x_norm, static_cast<int32_t>(num_logits),
                                   static_cast<int32_t>(h), stream),
                 "gathering the logits rows");
      check_cuda(cudaMemcpyAsync(attn, q, static_cast<size_t>(num_logits * q_dim) * 4, cudaMemcpyDeviceToDevice,
                                 stream),
                 "gathering the logits rows");
      check_cuda(cudaMemcpyAsync(hidden, x_norm, static_cast<size_t>(num_logits * h) * 4, cudaMemcpyDeviceToDevice,
                                 stream),
                 "gathering the logits rows");
      rows = num_logits;
    }
    const auto urows = static_cast<uint32_t>(rows);
    l.o->forward(attn, proj, urows, stream);
    if (tp != nullptr) tp->all_reduce(proj, rows * h, stream);
    check_cuda(cuda::rmsnorm(hidden, proj, dl.post_norm.data(), cuda::DType::f32, x_norm, rows, h, eps, stream),
               "rmsnorm");
    l.gate_up->forward(x_norm, a.gate_up.data(), urows, stream);
    check_cuda(cuda::silu_mul(a.gate_up.f32(), a.act.f32(), rows, inter, stream), "silu*up");
    l.down->forward(a.act.data(), proj, urows, stream);
    if (tp != nullptr) tp->all_reduce(proj, rows * h, stream);
  }
  check_cuda(cuda::rmsnorm(hidden, proj, f.weights.final_norm.data(), cuda::DType::f32, x_norm, num_logits, h, eps,
                           stream),
             "rmsnorm");
  if (tp == nullptr) {
    f.weights.host.lm_head->forward(x_norm, a.logits->data(), static_cast<uint32_t>(num_logits), stream);
    return;
  }
  f.weights.host.lm_head->forward(x_norm, tp->head_out(), static_cast<uint32_t>(num_logits), stream);
  tp->gather_logits(num_logits, a.logits->f32(), stream);
}

}  // namespace llmk
