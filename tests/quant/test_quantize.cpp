// `llmk quantize`'s algorithms (apps/quantize/) on stories260K: the
// calibration forward against the float64 golden logits, GPTQ's and AWQ's
// layer-wise output error against plain rounding (RTN) on the same inputs,
// and the written GPTQ/AWQ folders read back by the checkpoint loader to the
// very weights the quantizer computed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "apps/quantize/calib_forward.hpp"
#include "apps/quantize/quantized_writer.hpp"
#include "apps/quantize/quantizer.hpp"
#include "core/checkpoint.hpp"
#include "core/model_weights.hpp"
#include "core/safetensors_writer.hpp"
#include "quant/quantize_test_data.hpp"

using namespace llmk;
using namespace llmk::quantize;
using namespace llmk::test;
namespace fs = std::filesystem;

TEST_CASE("the calibration forward gives stories260K's golden last-position logits", "[quantize]") {
  const auto checkpoint = load_checkpoint(kStories);
  const ModelConfig& cfg = checkpoint->config();
  std::ifstream in(std::string(LLMK_SHARED_DIR) + "/golden/stories260K.json");
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);  // outlives the loop (a temporary's .at() would not)
  for (const auto& c : golden.at("cases")) {
    const std::vector<int32_t> ids = c.at("input_ids");
    const std::vector<double> want = c.at("last_logits");
    const auto n = static_cast<int64_t>(ids.size());
    CalibForward fwd(cfg, 1, n);
    const int64_t h = cfg.hidden_size, hd = cfg.head_dim, qd = cfg.num_heads * hd, kvd = cfg.num_kv_heads * hd,
                  inter = cfg.intermediate_size;
    std::vector<float> x(static_cast<size_t>(n * h)), hn(x.size()), q(static_cast<size_t>(n * qd)),
        k(static_cast<size_t>(n * kvd)), v(k.size()), att(q.size()), y(x.size()), g(static_cast<size_t>(n * inter)),
        u(g.size()), a(g.size());
    embed_rows(checkpoint->tensor("model.embed_tokens.weight"), ids.data(), n, x.data());
    for (int32_t i = 0; i < cfg.num_layers; ++i) {
      const LayerFloats l = read_layer(*checkpoint, i);
      fwd.rms_norm(x.data(), l.input_norm, hn.data());
      linear(hn.data(), n, l.q.data(), qd, h, q.data());
      linear(hn.data(), n, l.k.data(), kvd, h, k.data());
      linear(hn.data(), n, l.v.data(), kvd, h, v.data());
      fwd.attention(q.data(), k.data(), v.data(), att.data());
      linear(att.data(), n, l.o.data(), h, qd, y.data());
      for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
      fwd.rms_norm(x.data(), l.post_norm, hn.data());
      linear(hn.data(), n, l.gate.data(), inter, h, g.data());
      linear(hn.data(), n, l.up.data(), inter, h, u.data());
      fwd.silu_mul(g.data(), u.data(), a.data());
      linear(a.data(), n, l.down.data(), h, inter, y.data());
      for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
    }
    std::vector<float> norm(static_cast<size_t>(h));
    convert_to_f32(checkpoint->tensor("model.norm.weight").dtype, checkpoint->tensor("model.norm.weight").data,
                   norm.data(), norm.size());
    fwd.rms_norm(x.data(), norm, hn.data());
    const TensorView& head = checkpoint->tensor("model.embed_tokens.weight");  // tied
    std::vector<float> hw(static_cast<size_t>(head.numel())), logits(static_cast<size_t>(cfg.vocab_size));
    convert_to_f32(head.dtype, head.data, hw.data(), hw.size());
    linear(hn.data() + (n - 1) * h, 1, hw.data(), cfg.vocab_size, h, logits.data());
    double num = 0, den = 0;
    for (size_t j = 0; j < logits.size(); ++j) num += std::pow(logits[j] - want[j], 2), den += want[j] * want[j];
    CHECK(std::sqrt(num / den) < 1e-5);
  }
}

TEST_CASE("GPTQ's output error on its calibration inputs is below RTN's for every projection", "[quantize]") {
  const auto checkpoint = load_checkpoint(kStories);
  const std::vector<int32_t> tokens = calibration_tokens();
  for (const QuantizeOptions& o : {options(Method::gptq, 4, 32), options(Method::gptq, 4, 32, true),
                                   options(Method::gptq, 4, 16, true), options(Method::gptq, 8, -1),
                                   options(Method::gptq, 8, -1, true)}) {
    INFO("bits " << o.spec.bits << ", group " << o.spec.group_size << ", act-order " << o.spec.act_order);
    const QuantizeResult r = quantize_model(*checkpoint, tokens, o);
    size_t quantized = 0;
    for (const LinearReport& rep : r.report) {
      if (rep.kept_float) continue;
      INFO(rep.name << ": GPTQ " << rep.error << ", RTN " << rep.rtn_error);
      CHECK(rep.error < rep.rtn_error);
      ++quantized;
    }
    // q/k/v/o of 5 layers; at 8 bits the 172-wide MLP packs too (4 per int32).
    CHECK(quantized == (o.spec.bits == 8 ? 35u : 20u));
  }
}

TEST_CASE("AWQ's scales never raise a layer group's output error over RTN's, and lower it somewhere", "[quantize]") {
  const auto checkpoint = load_checkpoint(kStories);
  const QuantizeResult r = quantize_model(*checkpoint, calibration_tokens(), options(Method::awq, 4, 16));
  size_t lower = 0, quantized = 0;
  for (const LinearReport& rep : r.report) {
    if (rep.kept_float) continue;
    INFO(rep.name << ": AWQ " << rep.error << ", RTN " << rep.rtn_error);
    CHECK(rep.error <= rep.rtn_error);
    lower += rep.error < rep.rtn_error ? 1 : 0;
    ++quantized;
  }
  CHECK(quantized == 20u);
  CHECK(lower >= 10u);  // at least the q/k/v group (3 each) of most layers
}

TEST_CASE("a written GPTQ or AWQ folder loads to the quantizer's own dequantized weights", "[quantize]") {
  const auto checkpoint = load_checkpoint(kStories);
  const std::vector<int32_t> tokens = calibration_tokens();
  for (const QuantizeOptions& o : {options(Method::gptq, 4, 32, true), options(Method::gptq, 8, -1, true),
                                   options(Method::rtn, 4, 32), options(Method::awq, 4, 32)}) {
    INFO("method " << static_cast<int>(o.method) << ", bits " << o.spec.bits);
    const QuantizeResult r = quantize_model(*checkpoint, tokens, o);
    TempDir dir;
    CHECK(write_quantized(*checkpoint, kStories, r, o, dir.path()).empty());  // the tokenizer came along
    const auto loaded = load_checkpoint(dir.path());
    for (const auto& [name, q] : r.linears) {
      INFO(name);
      const TensorView& t = loaded->tensor(name + ".weight");
      REQUIRE(t.dtype == (o.spec.bits == 4 ? DType::int4_groups : DType::int8_groups));
      std::vector<float> got(static_cast<size_t>(t.numel()));
      convert_to_f32(t.dtype, t.data, got.data(), got.size());
      CHECK(std::memcmp(got.data(), q.dequantized.data(), got.size() * 4) == 0);
    }
    for (const auto& [name, values] : r.floats) {  // AWQ's rescaled norms
      INFO(name);
      const TensorView& t = loaded->tensor(name);
      REQUIRE(t.dtype == DType::f32);
      CHECK(std::memcmp(t.data, values.data(), values.size() * 4) == 0);
    }
    CHECK(r.linears.size() == (o.spec.bits == 8 ? 35u : 20u));
  }
}
