#include "apps/quantize/quantized_writer.hpp"

#include <cstring>
#include <fstream>

#include "core/error.hpp"

namespace llmk::quantize {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Tensors of one safetensors file, written in name order.
class SafetensorsOut {
 public:
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    tensors_[name] = {dtype, std::move(shape), std::move(bytes)};
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, const float* data, size_t n) {
    std::vector<uint8_t> b(n * 4);
    std::memcpy(b.data(), data, b.size());
    add(name, "F32", std::move(shape), std::move(b));
  }
  void write(const fs::path& file) const {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const auto& [name, t] : tensors_) {
      header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
      off += t.bytes.size();
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::ofstream out(file, std::ios::binary);
    const uint64_t len = h.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& [name, t] : tensors_)
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    if (!out) throw Error(ErrorCode::internal, "quantize: cannot write " + file.string());
  }

 private:
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Tensor> tensors_;
};

std::vector<uint8_t> words_bytes(const std::vector<uint32_t>& w) {
  std::vector<uint8_t> b(w.size() * 4);
  std::memcpy(b.data(), w.data(), b.size());
  return b;
}

// scales [out, G] -> F16 [G, out].
std::vector<uint8_t> scales_f16(const IntGroupsWeight& w) {
  const int64_t groups = w.num_groups(), out = w.out_features;
  std::vector<uint16_t> s(static_cast<size_t>(groups * out));
  for (int64_t n = 0; n < out; ++n)
    for (int64_t g = 0; g < groups; ++g) s[static_cast<size_t>(g * out + n)] = f32_to_f16(w.scales[static_cast<size_t>(n * groups + g)]);
  std::vector<uint8_t> b(s.size() * 2);
  std::memcpy(b.data(), s.data(), b.size());
  return b;
}

void add_gptq(SafetensorsOut& st, const std::string& prefix, const IntGroupsWeight& w) {
  const int64_t out = w.out_features, in = w.in_features, groups = w.num_groups();
  const uint32_t bits = w.bits, pack = 32 / bits, mask = (1u << bits) - 1;
  std::vector<uint32_t> pos(static_cast<size_t>(in));  // where the model's column k sits in q
  for (int64_t j = 0; j < in; ++j) pos[w.input_order.empty() ? j : w.input_order[static_cast<size_t>(j)]] = static_cast<uint32_t>(j);
  std::vector<uint32_t> qweight(static_cast<size_t>(in / pack * out), 0), qzeros(static_cast<size_t>(groups * out / pack), 0);
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t k = 0; k < in; ++k) {
    g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(pos[static_cast<size_t>(k)] / w.group_size);
    for (int64_t n = 0; n < out; ++n)
      qweight[static_cast<size_t>((k / pack) * out + n)] |= uint32_t{w.q_at(n, pos[static_cast<size_t>(k)])}
                                                            << (bits * (k % pack));
  }
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t n = 0; n < out; ++n)  // v1: zero - 1 (the quantizer keeps zero >= 1)
      qzeros[static_cast<size_t>(g * (out / pack) + n / pack)] |=
          ((uint32_t{w.zeros[static_cast<size_t>(n * groups + g)]} - 1) & mask) << (bits * (n % pack));
  st.add(prefix + ".qweight", "I32", {in / pack, out}, words_bytes(qweight));
  st.add(prefix + ".qzeros", "I32", {groups, out / pack}, words_bytes(qzeros));
  st.add(prefix + ".scales", "F16", {groups, out}, scales_f16(w));
  std::vector<uint8_t> gb(g_idx.size() * 4);
  std::memcpy(gb.data(), g_idx.data(), gb.size());
  st.add(prefix + ".g_idx", "I32", {in}, std::move(gb));
}

void add_awq(SafetensorsOut& st, const std::string& prefix, const IntGroupsWeight& w) {
  static constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // output j of a word sits in nibble kNibble[j]
  const int64_t out = w.out_features, in = w.in_features, groups = w.num_groups();
  std::vector<uint32_t> qweight(static_cast<size_t>(in * out / 8), 0), qzeros(static_cast<size_t>(groups * out / 8), 0);
  for (int64_t k = 0; k < in; ++k)
    for (int64_t n = 0; n < out; ++n)
      qweight[static_cast<size_t>(k * (out / 8) + n / 8)] |= uint32_t{w.q_at(n, k)} << (4 * kNibble[n % 8]);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t n = 0; n < out; ++n)
      qzeros[static_cast<size_t>(g * (out / 8) + n / 8)] |= uint32_t{w.zeros[static_cast<size_t>(n * groups + g)]}
                                                          << (4 * kNibble[n % 8]);
  st.add(prefix + ".qweight", "I32", {in, out / 8}, words_bytes(qweight));
  st.add(prefix + ".qzeros", "I32", {groups, out / 8}, words_bytes(qzeros));
  st.add(prefix + ".scales", "F16", {groups, out}, scales_f16(w));
}

// SpQR-style outliers (core/gptq_checkpoint.hpp): <prefix>.outlier_row_ptr I32 [out + 1],
// .outlier_cols I32 [n], .outlier_values F16 [n] (the quantizer rounded them to f16 already).
void add_outliers(SafetensorsOut& st, const std::string& prefix, const OutlierCsr& o) {
  auto ints = [](const std::vector<uint32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::vector<uint16_t> h(o.values.size());
  for (size_t j = 0; j < h.size(); ++j) h[j] = f32_to_f16(o.values[j]);
  std::vector<uint8_t> hb(h.size() * 2);
  std::memcpy(hb.data(), h.data(), hb.size());
  st.add(prefix + ".outlier_row_ptr", "I32", {static_cast<int64_t>(o.row_ptr.size())}, ints(o.row_ptr));
  st.add(prefix + ".outlier_cols", "I32", {static_cast<int64_t>(o.cols.size())}, ints(o.cols));
  st.add(prefix + ".outlier_values", "F16", {static_cast<int64_t>(h.size())}, std::move(hb));
}

// compressed-tensors int-quantized: X.weight I8 [out, in] (q - 128 of the one-group-per-row weight),
// X.weight_scale F32 [out, 1].
void add_int8_channel(SafetensorsOut& st, const std::string& prefix, const IntGroupsWeight& w) {
  const int64_t out = w.out_features, in = w.in_features;
  std::vector<uint8_t> q(static_cast<size_t>(out * in));
  for (int64_t n = 0; n < out; ++n)
    for (int64_t k = 0; k < in; ++k)
      q[static_cast<size_t>(n * in + k)] = static_cast<uint8_t>(static_cast<int8_t>(int{w.q_at(n, k)} - 128));
  st.add(prefix + ".weight", "I8", {out, in}, std::move(q));
  st.add_f32(prefix + ".weight_scale", {out, 1}, w.scales.data(), w.scales.size());
}

// llm-compressor's W8A8 scheme: int8 weights per output channel, int8 activations per token, dynamic.
json w8a8_config() {
  const json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"},
                        {"group_size", nullptr}, {"dynamic", false}, {"observer", "minmax"}};
  const json activations = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "token"},
                            {"group_size", nullptr}, {"dynamic", true}, {"observer", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", activations},
                         {"output_activations", nullptr}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr}};
}

void write_json(const fs::path& file, const json& j) {
  std::ofstream out(file);
  out << j.dump(2) << "\n";
  if (!out) throw Error(ErrorCode::internal, "quantize: cannot write " + file.string());
}

}  // namespace

json config_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.architecture == "Qwen2ForCausalLM" ? "qwen2" : c.architecture == "MistralForCausalLM" ? "mistral" : "llama";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids.front()) : json(c.eos_token_ids);
  j["torch_dtype"] = "float32";
  const RopeScaling& r = c.rope_scaling;
  if (!r.freq_factors.empty())
    throw Error(ErrorCode::unsupported, "quantize: the source's rope_freqs tensor has no config.json form");
  if (r.type == RopeScalingType::linear) j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
  if (r.type == RopeScalingType::llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  if (c.sliding_window) j["sliding_window"] = *c.sliding_window;
  return j;
}

std::string write_quantized(const Checkpoint& source, const fs::path& source_path, const QuantizeResult& result,
                            const QuantizeOptions& o, const fs::path& out_dir) {
  if (!o.round_weights)
    throw Error(ErrorCode::invalid_argument, "quantize: weights left unrounded have no quantized format to write");
  fs::create_directories(out_dir);
  const ModelConfig& cfg = source.config();
  SafetensorsOut st;
  for (const auto& [name, shape] : expected_tensors(cfg)) {
    const std::string prefix = name.size() > 7 ? name.substr(0, name.size() - 7) : name;
    if (const auto q = result.linears.find(prefix); q != result.linears.end() && name.ends_with(".weight")) {
      if (o.method == Method::awq) add_awq(st, prefix, q->second.weight);
      else if (o.method == Method::smoothquant) add_int8_channel(st, prefix, q->second.weight);
      else add_gptq(st, prefix, q->second.weight);
      if (!q->second.outliers.row_ptr.empty()) add_outliers(st, prefix, q->second.outliers);
      continue;
    }
    if (const auto f = result.floats.find(name); f != result.floats.end()) {
      st.add_f32(name, shape, f->second.data(), f->second.size());
      continue;
    }
    const TensorView& t = source.tensor(name);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data, v.data(), v.size());
    st.add_f32(name, shape, v.data(), v.size());
  }
  st.write(out_dir / "model.safetensors");

  const int64_t group = o.spec.group_size <= 0 ? -1 : o.spec.group_size;
  json qc;
  if (o.method == Method::smoothquant) {
    qc = w8a8_config();
  } else if (o.method == Method::awq) {
    qc = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", group}, {"zero_point", true}, {"version", "gemm"}};
  } else {
    qc = {{"quant_method", "gptq"}, {"bits", o.spec.bits}, {"group_size", group}, {"desc_act", o.spec.act_order},
          {"sym", false}, {"true_sequential", true}, {"damp_percent", o.spec.damp}, {"checkpoint_format", "gptq"}};
    if (o.spec.outlier_fraction > 0.0)
      qc["outliers"] = {{"format", "csr"}, {"fraction", o.spec.outlier_fraction}, {"values", "residual"}};
    write_json(out_dir / "quantize_config.json", qc);
  }
  json config = config_json(cfg);
  config["quantization_config"] = qc;
  write_json(out_dir / "config.json", config);
  write_json(out_dir / "generation_config.json",
             {{"bos_token_id", cfg.bos_token_id},
              {"eos_token_id", cfg.eos_token_ids.size() == 1 ? json(cfg.eos_token_ids.front()) : json(cfg.eos_token_ids)}});
  bool tokenizer = false;
  if (fs::is_directory(source_path))
    for (const char* f : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      if (fs::is_regular_file(source_path / f)) {
        fs::copy_file(source_path / f, out_dir / f, fs::copy_options::overwrite_existing);
        tokenizer = tokenizer || std::string(f).starts_with("tokenizer.");
      }
  if (!fs::is_regular_file(out_dir / "tokenizer_config.json"))
    write_json(out_dir / "tokenizer_config.json", {{"add_bos_token", cfg.add_bos_token}});
  if (tokenizer) return "";
  return "the source's tokenizer is not a file this folder can hold: load it with --tokenizer " +
         source.tokenizer_path().string();
}

}  // namespace llmk::quantize
