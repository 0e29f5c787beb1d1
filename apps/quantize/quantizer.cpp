#include "apps/quantize/quantizer.hpp"

#include <stdexcept>

#include "apps/quantize/awq_scales.hpp"
#include "apps/quantize/calib_forward.hpp"
#include "core/error.hpp"
#include "core/model_weights.hpp"

namespace llmk::quantize {
namespace {

struct Proj {
  const char* name;  // under model.layers.N.
  std::vector<float>* w;
  int64_t out, in;
};

class LayerQuantizer {
 public:
  LayerQuantizer(const ModelConfig& cfg, const QuantizeOptions& o, CalibForward& fwd, QuantizeResult& result)
      : cfg_(cfg), o_(o), fwd_(fwd), result_(result) {}

  // x: the residual stream [rows, hidden], advanced through the quantized layer.
  void run(int32_t layer, LayerFloats& l, std::vector<float>& x) {
    prefix_ = "model.layers." + std::to_string(layer) + ".";
    const int64_t rows = fwd_.rows(), h = cfg_.hidden_size, hd = cfg_.head_dim;
    const int64_t q_dim = cfg_.num_heads * hd, kv_dim = cfg_.num_kv_heads * hd, inter = cfg_.intermediate_size;
    const bool awq = o_.method == Method::awq;
    std::vector<float> hn(static_cast<size_t>(rows * h)), q(static_cast<size_t>(rows * q_dim)),
        k(static_cast<size_t>(rows * kv_dim)), v(k.size()), attn(q.size()), y(hn.size());
    const Proj pq{"self_attn.q_proj", &l.q, q_dim, h}, pk{"self_attn.k_proj", &l.k, kv_dim, h},
        pv{"self_attn.v_proj", &l.v, kv_dim, h}, po{"self_attn.o_proj", &l.o, h, q_dim},
        pg{"mlp.gate_proj", &l.gate, inter, h}, pu{"mlp.up_proj", &l.up, inter, h}, pd{"mlp.down_proj", &l.down, h, inter};

    auto attention = [&] {
      linear(hn.data(), rows, l.q.data(), q_dim, h, q.data(), l.q_bias);
      linear(hn.data(), rows, l.k.data(), kv_dim, h, k.data(), l.k_bias);
      linear(hn.data(), rows, l.v.data(), kv_dim, h, v.data(), l.v_bias);
      fwd_.attention(q.data(), k.data(), v.data(), attn.data());
    };
    fwd_.rms_norm(x.data(), l.input_norm, hn.data());
    if (awq) {
      const AwqScales s = search(hn.data(), {pq, pk, pv});
      fold_norm(s.scales, l.input_norm, {pq, pk, pv});
      fwd_.rms_norm(x.data(), l.input_norm, hn.data());
      // o_proj's input channels are v's outputs only when every head has its own KV head.
      if (cfg_.num_heads == cfg_.num_kv_heads) {
        attention();
        const AwqScales so = search(attn.data(), {po});
        fold_rows(so.scales, l.v, l.v_bias, h);
        fold(so.scales, l.o, po.in);
      }
    }
    quantize(hn.data(), {pq, pk, pv});
    attention();
    quantize(attn.data(), {po}, /*searched=*/awq && cfg_.num_heads == cfg_.num_kv_heads);
    linear(attn.data(), rows, l.o.data(), h, q_dim, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];

    fwd_.rms_norm(x.data(), l.post_norm, hn.data());
    std::vector<float> g(static_cast<size_t>(rows * inter)), u(g.size()), a(g.size());
    auto mlp_input = [&] {
      linear(hn.data(), rows, l.gate.data(), inter, h, g.data());
      linear(hn.data(), rows, l.up.data(), inter, h, u.data());
      fwd_.silu_mul(g.data(), u.data(), a.data());
    };
    if (awq) {
      const AwqScales s = search(hn.data(), {pg, pu});
      fold_norm(s.scales, l.post_norm, {pg, pu});
      fwd_.rms_norm(x.data(), l.post_norm, hn.data());
      mlp_input();
      const AwqScales sd = search(a.data(), {pd});
      std::vector<float> none;
      fold_rows(sd.scales, l.up, none, h);
      fold(sd.scales, l.down, pd.in);
      quantize(hn.data(), {pg, pu});
      mlp_input();
      quantize(a.data(), {pd}, /*searched=*/true);
    } else {
      quantize(hn.data(), {pg, pu});
      mlp_input();
      quantize(a.data(), {pd});
    }
    linear(a.data(), rows, l.down.data(), h, inter, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    if (awq) {
      result_.floats[prefix_ + "input_layernorm.weight"] = l.input_norm;
      result_.floats[prefix_ + "post_attention_layernorm.weight"] = l.post_norm;
    }
  }

 private:
  AwqScales search(const float* x, const std::vector<Proj>& group) {
    std::vector<const float*> ws;
    std::vector<int64_t> outs;
    for (const Proj& p : group) {
      if (!packable(o_.method, o_.spec, p.out, p.in)) return AwqScales{std::vector<float>(static_cast<size_t>(p.in), 1.0f)};
      ws.push_back(p.w->data());
      outs.push_back(p.out);
    }
    AwqScales s = awq_search(x, fwd_.rows(), group.front().in, ws, outs, o_.spec, o_.awq_grid);
    for (const Proj& p : group) group_errors_[p.name] = {s.error, s.rtn_error};
    return s;
  }

  // Weight columns times s; the producing vector (a norm's weight) divided by it.
  static void fold_norm(const std::vector<float>& s, std::vector<float>& norm, const std::vector<Proj>& group) {
    for (size_t c = 0; c < s.size(); ++c) norm[c] /= s[c];
    for (const Proj& p : group) fold(s, *p.w, p.in);
  }
  static void fold(const std::vector<float>& s, std::vector<float>& w, int64_t in) {
    for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % static_cast<size_t>(in)];
  }
  // The producing projection's output rows (and bias) divided by s.
  static void fold_rows(const std::vector<float>& s, std::vector<float>& w, std::vector<float>& bias, int64_t in) {
    for (size_t r = 0; r < s.size(); ++r) {
      for (int64_t c = 0; c < in; ++c) w[r * static_cast<size_t>(in) + static_cast<size_t>(c)] /= s[r];
      if (!bias.empty()) bias[r] /= s[r];
    }
  }

  // Quantizes each projection of the group on input x [rows, in] and puts its dequantized weights in place.
  void quantize(const float* x, const std::vector<Proj>& group, bool searched = false) {
    const int64_t rows = fwd_.rows();
    Hessian hessian(group.front().in);
    if (o_.method == Method::gptq) hessian.add(x, rows);
    for (const Proj& p : group) {
      LinearReport rep;
      rep.name = prefix_ + p.name;
      if (!packable(o_.method, o_.spec, p.out, p.in)) {
        rep.kept_float = true;
        if (o_.method == Method::awq) result_.floats[rep.name + ".weight"] = *p.w;  // rows may carry folded scales
        result_.report.push_back(rep);
        continue;
      }
      QuantizedLinear rtn = rtn_quantize(p.w->data(), p.out, p.in, o_.spec);
      QuantizedLinear q = o_.method == Method::gptq ? gptq_quantize(p.w->data(), p.out, p.in, hessian, o_.spec)
                                                    : std::move(rtn);
      if (o_.method == Method::gptq) {
        rep.error = output_error(x, rows, p.w->data(), q.dequantized.data(), p.out, p.in);
        rep.rtn_error = output_error(x, rows, p.w->data(), rtn.dequantized.data(), p.out, p.in);
      } else if (o_.method == Method::awq && group_errors_.count(p.name) && (searched || group.size() > 1)) {
        rep.error = group_errors_[p.name].first;
        rep.rtn_error = group_errors_[p.name].second;
      } else {
        rep.error = rep.rtn_error = output_error(x, rows, p.w->data(), q.dequantized.data(), p.out, p.in);
      }
      *p.w = q.dequantized;
      result_.linears.emplace(rep.name, std::move(q));
      result_.report.push_back(rep);
    }
  }

  const ModelConfig& cfg_;
  const QuantizeOptions& o_;
  CalibForward& fwd_;
  QuantizeResult& result_;
  std::string prefix_;
  std::map<std::string, std::pair<double, double>> group_errors_;
};

}  // namespace

bool packable(Method method, const QuantSpec& spec, int64_t out, int64_t in) {
  const int64_t per_word = 32 / spec.bits, group = spec.group_for(in);
  if (group > in || in % group != 0) return false;
  if (method == Method::awq) return spec.bits == 4 && out % 8 == 0;
  return in % per_word == 0 && out % per_word == 0;
}

QuantizeResult quantize_model(const Checkpoint& checkpoint, const std::vector<int32_t>& tokens,
                              const QuantizeOptions& o, const std::function<void(int32_t, int32_t)>& on_layer) {
  const ModelConfig& cfg = checkpoint.config();
  if (o.num_samples <= 0 || o.seq_len <= 0)
    throw Error(ErrorCode::invalid_argument, "quantize: samples and sequence length must be positive");
  const int64_t need = o.num_samples * o.seq_len;
  if (static_cast<int64_t>(tokens.size()) < need)
    throw Error(ErrorCode::invalid_argument, "quantize: the calibration text has " + std::to_string(tokens.size()) +
                                                 " tokens; " + std::to_string(o.num_samples) + " samples of " +
                                                 std::to_string(o.seq_len) + " need " + std::to_string(need));
  CalibForward fwd(cfg, o.num_samples, o.seq_len);
  std::vector<float> x(static_cast<size_t>(need * cfg.hidden_size));
  embed_rows(checkpoint.tensor("model.embed_tokens.weight"), tokens.data(), need, x.data());
  QuantizeResult result;
  LayerQuantizer layer(cfg, o, fwd, result);
  for (int32_t i = 0; i < cfg.num_layers; ++i) {
    LayerFloats l = read_layer(checkpoint, i);
    layer.run(i, l, x);
    if (on_layer) on_layer(i + 1, cfg.num_layers);
  }
  return result;
}

}  // namespace llmk::quantize
