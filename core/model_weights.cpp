#include "core/model_weights.hpp"

#include <cstring>
#include <string>

#include "core/error.hpp"

namespace llmk {

namespace {

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
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

size_t ModelWeights::bytes() const {
  size_t total = embed->nbytes() + final_norm.size() * 4;
  for (const auto& l : layers)
    total += l.qkv->weight_bytes() + l.o->weight_bytes() + l.gate_up->weight_bytes() + l.down->weight_bytes() +
             (l.input_norm.size() + l.post_norm.size() + l.qkv_bias.size()) * 4;
  // A tied head shares the embedding's bytes when borrowed; count what the plugin reports.
  total += lm_head->weight_bytes();
  return total;
}

ModelWeights load_weights(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& ecfg,
                          const ModelRuntime& rt, const LinearPlacement& placement) {
  const ModelConfig& cfg = checkpoint.config();
  Plugin linear_plugin = plugins.load(ecfg.plugins.linear, LLMK_PLUGIN_LINEAR);
  const std::string& options = ecfg.plugins.linear_options;
  const std::shared_ptr<LinearWorkspace>& workspace = placement.workspace;  // shared by every layer
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
    d.device = placement.device;
    d.activation_dtype = LLMK_DTYPE_F32;
    return std::make_unique<LinearImpl>(linear_plugin, d, workspace);
  };
  const int64_t h = cfg.hidden_size, inter = cfg.intermediate_size;
  const int64_t q_dim = static_cast<int64_t>(cfg.num_heads) * cfg.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(cfg.num_kv_heads) * cfg.head_dim;
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  ModelWeights w;
  w.layers.resize(cfg.num_layers);
  for (int32_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    const TensorView& wq = checkpoint.tensor(p + "self_attn.q_proj.weight");
    const TensorView& wk = checkpoint.tensor(p + "self_attn.k_proj.weight");
    const TensorView& wv = checkpoint.tensor(p + "self_attn.v_proj.weight");
    const TensorView& wo = checkpoint.tensor(p + "self_attn.o_proj.weight");
    const TensorView& wg = checkpoint.tensor(p + "mlp.gate_proj.weight");
    const TensorView& wu = checkpoint.tensor(p + "mlp.up_proj.weight");
    const TensorView& wd = checkpoint.tensor(p + "mlp.down_proj.weight");
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
  const TensorView& head = cfg.tie_word_embeddings && !checkpoint.has("lm_head.weight")
                               ? checkpoint.tensor("model.embed_tokens.weight")
                               : checkpoint.tensor("lm_head.weight");
  w.lm_head = make("lm_head", head.data, head.dtype, cfg.vocab_size, h, true, rt.max_step_tokens);

  for (int32_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.layers[i].input_norm = to_f32(checkpoint.tensor(p + "input_layernorm.weight"));
    w.layers[i].post_norm = to_f32(checkpoint.tensor(p + "post_attention_layernorm.weight"));
    if (cfg.attention_bias) {
      std::vector<float>& bias = w.layers[i].qkv_bias;
      for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        const std::vector<float> b = to_f32(checkpoint.tensor(p + "self_attn." + part + ".bias"));
        bias.insert(bias.end(), b.begin(), b.end());
      }
    }
  }
  w.final_norm = to_f32(checkpoint.tensor("model.norm.weight"));
  w.embed = &checkpoint.tensor("model.embed_tokens.weight");
  if (w.embed->dtype != DType::f32 && w.embed->dtype != DType::f16 && w.embed->dtype != DType::bf16)
    throw Error(ErrorCode::unsupported, "model.embed_tokens.weight has dtype " + std::string(dtype_name(w.embed->dtype)));
  return w;
}

}  // namespace llmk
