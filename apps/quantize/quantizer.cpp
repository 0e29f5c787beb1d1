#include "apps/quantize/quantizer.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "apps/quantize/awq_scales.hpp"
#include "apps/quantize/calib_forward.hpp"
#include "apps/quantize/scale_fold.hpp"
#include "apps/quantize/smoothquant.hpp"
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
    const bool awq = o_.method == Method::awq, smooth = o_.method == Method::smoothquant;
    // o_proj's input channels are v's outputs; AWQ folds into them only when every head has its own KV
    // head, SmoothQuant ties the scale of query heads that share one (max_over_shared_heads).
    const bool fold_o = smooth || cfg_.num_heads == cfg_.num_kv_heads;
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
    auto fold_o_scales = [&] {
      attention();
      const std::vector<float> so = awq ? scales(attn.data(), {po}, "self_attn.o_proj") : o_scales(attn.data(), po);
      divide_rows(so, l.v, l.v_bias, h);
      scale_columns(awq ? so : expand_kv_scales(so, cfg_.num_heads, cfg_.num_kv_heads, hd), l.o, po.in);
    };
    fwd_.rms_norm(x.data(), l.input_norm, hn.data());
    if (awq || smooth) {
      // SmoothQuant folds the later input's scales first (the fold leaves that input's statistics as
      // they were), so the q/k/v scales see the v rows the file stores; AWQ searches in model order.
      if (smooth) fold_o_scales();
      const std::vector<float> s = scales(hn.data(), {pq, pk, pv}, "self_attn.qkv");
      fold_into_norm(s, l.input_norm, {&l.q, &l.k, &l.v}, h);
      fwd_.rms_norm(x.data(), l.input_norm, hn.data());
      if (awq && fold_o) fold_o_scales();
    }
    quantize(hn.data(), {pq, pk, pv});
    attention();
    quantize(attn.data(), {po}, /*searched=*/(awq || smooth) && fold_o);
    linear(attn.data(), rows, l.o.data(), h, q_dim, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];

    fwd_.rms_norm(x.data(), l.post_norm, hn.data());
    std::vector<float> g(static_cast<size_t>(rows * inter)), u(g.size()), a(g.size());
    auto mlp_input = [&] {
      linear(hn.data(), rows, l.gate.data(), inter, h, g.data());
      linear(hn.data(), rows, l.up.data(), inter, h, u.data());
      fwd_.silu_mul(g.data(), u.data(), a.data());
    };
    if (awq || smooth) {
      auto fold_down_scales = [&] {
        mlp_input();
        const std::vector<float> sd = scales(a.data(), {pd}, "mlp.down_proj");
        std::vector<float> none;
        divide_rows(sd, l.up, none, h);
        scale_columns(sd, l.down, pd.in);
      };
      if (smooth) fold_down_scales();
      const std::vector<float> s = scales(hn.data(), {pg, pu}, "mlp.gate_up");
      fold_into_norm(s, l.post_norm, {&l.gate, &l.up}, h);
      fwd_.rms_norm(x.data(), l.post_norm, hn.data());
      if (awq) fold_down_scales();
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
    if (awq || smooth) {
      result_.floats[prefix_ + "input_layernorm.weight"] = l.input_norm;
      result_.floats[prefix_ + "post_attention_layernorm.weight"] = l.post_norm;
      if (fold_o && !l.v_bias.empty()) result_.floats[prefix_ + "self_attn.v_proj.bias"] = l.v_bias;
    }
  }

 private:
  // The method's per-input-channel scales for a group sharing input x: AWQ's search, or SmoothQuant's.
  std::vector<float> scales(const float* x, const std::vector<Proj>& group, const char* input) {
    if (o_.method == Method::awq) return search(x, group).scales;
    std::vector<const float*> ws;
    std::vector<int64_t> outs;
    for (const Proj& p : group) ws.push_back(p.w->data()), outs.push_back(p.out);
    const int64_t in = group.front().in;
    const std::vector<float> act = channel_abs_max(x, fwd_.rows(), in);
    std::vector<float> s = smooth_scales(act, column_abs_max(ws, outs, in), o_.alpha);
    record(input, act, s);
    const std::pair<double, double> errors{w8a8_error(x, fwd_.rows(), in, ws, outs, s),
                                           w8a8_error(x, fwd_.rows(), in, ws, outs, {})};
    for (const Proj& p : group) group_errors_[p.name] = errors;
    return s;
  }

  // SmoothQuant's o_proj scales, one per v_proj row: the statistics of query heads that share a KV head pooled.
  std::vector<float> o_scales(const float* attn, const Proj& po) {
    const int64_t heads = cfg_.num_heads, kv_heads = cfg_.num_kv_heads, hd = cfg_.head_dim;
    const std::vector<float> act = channel_abs_max(attn, fwd_.rows(), po.in);
    const std::vector<float> s_kv =
        smooth_scales(max_over_shared_heads(act, heads, kv_heads, hd),
                      max_over_shared_heads(column_abs_max({po.w->data()}, {po.out}, po.in), heads, kv_heads, hd), o_.alpha);
    const std::vector<float> s = expand_kv_scales(s_kv, heads, kv_heads, hd);
    record("self_attn.o_proj", act, s);
    group_errors_[po.name] = {w8a8_error(attn, fwd_.rows(), po.in, {po.w->data()}, {po.out}, s),
                              w8a8_error(attn, fwd_.rows(), po.in, {po.w->data()}, {po.out}, {})};
    return s_kv;
  }

  void record(const char* input, const std::vector<float>& act, const std::vector<float>& s) {
    auto summary = [](std::vector<float> m, double& abs_max, double& ratio) {
      abs_max = *std::max_element(m.begin(), m.end());
      std::nth_element(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(m.size() / 2), m.end());
      ratio = m[m.size() / 2] > 0 ? abs_max / m[m.size() / 2] : 0.0;
    };
    SmoothReport r;
    r.input = prefix_ + input;
    std::vector<float> after(act.size());
    for (size_t c = 0; c < act.size(); ++c) after[c] = act[c] / s[c];
    summary(act, r.abs_max, r.outlier_ratio);
    summary(after, r.smoothed_abs_max, r.smoothed_outlier_ratio);
    result_.smoothing.push_back(r);
  }

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
      if (o_.method == Method::smoothquant) {
        std::tie(rep.error, rep.rtn_error) = group_errors_.at(p.name);
        result_.report.push_back(rep);
        if (!o_.round_weights) {
          result_.floats[rep.name + ".weight"] = *p.w;
          continue;
        }
        QuantizedLinear q = int8_channel_quantize(p.w->data(), p.out, p.in);
        *p.w = q.dequantized;
        result_.linears.emplace(rep.name, std::move(q));
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
  if (method == Method::smoothquant) return true;  // int8 per output channel: any shape
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
