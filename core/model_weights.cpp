#include "core/model_weights.hpp"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/gguf_types.hpp"
#include "core/int_groups.hpp"
#include "kernels/cpu/embedding.hpp"

namespace llmk {

namespace {

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

// Builds the linear layers: picks the plugin for each weight's stored type
// (the rule is model_weights.hpp's), stacks the parts of fused layers that
// share a plugin and a type, and remembers what it dequantized for the log.
class LinearBuilder {
 public:
  LinearBuilder(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
                const ModelRuntime& rt, const LinearPlacement& placement)
      : checkpoint_(checkpoint), plugins_(plugins), cfg_(cfg), rt_(rt), placement_(placement),
        main_(plugins.load(cfg.plugins.linear, LLMK_PLUGIN_LINEAR)) {}

  // One layer over the rows of `parts` stacked ([sum of their rows, in]).
  std::unique_ptr<LinearLayer> make(const std::string& name, const std::vector<const TensorView*>& parts) {
    struct Run {
      const Plugin* plugin;
      DType dtype;
      std::vector<const TensorView*> tensors;
    };
    std::vector<Run> runs;
    for (const TensorView* t : parts)
      if (placement_.device != LLMK_DEVICE_CPU && checkpoint_.has(outlier_name(*t, "row_ptr")))
        throw Error(ErrorCode::unsupported,
                    outlier_name(*t, "row_ptr") + ": SpQR-style outliers are added on the CPU only (on another "
                                                  "device the linear plugins multiply the integer groups alone); "
                                                  "quantize without --outliers for this executor");
    for (const TensorView* t : parts) {
      auto [plugin, dtype] = choose(name, *t);
      // Integer groups do not stack (each part has its own groups and input order): one part each.
      if (!runs.empty() && runs.back().plugin == plugin && runs.back().dtype == dtype && !is_int_groups_dtype(dtype))
        runs.back().tensors.push_back(t);
      else
        runs.push_back(Run{plugin, dtype, {t}});
    }
    // Parts are stitched on the host: off the CPU, mixed parts become one
    // F32 weight for plugins.linear.
    if (runs.size() > 1 && placement_.device != LLMK_DEVICE_CPU) {
      for (size_t i = 1; i < runs.size(); ++i)
        runs.front().tensors.insert(runs.front().tensors.end(), runs[i].tensors.begin(), runs[i].tensors.end());
      runs.resize(1);
      runs.front().plugin = &main_;
      runs.front().dtype = DType::f32;
    }
    std::vector<LinearLayer::Part> built;
    for (const Run& run : runs) {
      int64_t out = 0;
      for (const TensorView* t : run.tensors) out += t->shape[0];
      const int64_t in = run.tensors.front()->shape[1];
      const bool borrowed = run.tensors.size() == 1 && run.dtype == run.tensors.front()->dtype;
      const std::vector<uint8_t> stacked = borrowed ? std::vector<uint8_t>() : stack(run.tensors, run.dtype);
      const void* data = borrowed ? run.tensors.front()->data : stacked.data();
      const std::string part_name = runs.size() == 1 ? name : name + "[" + run.tensors.front()->name + "]";
      // Weights stacked here live only until the plugin has taken what it needs.
      llmk_linear_desc d = desc(part_name, data, run.dtype, out, in, borrowed, *run.plugin);
      built.push_back(LinearLayer::Part{std::make_unique<LinearImpl>(*run.plugin, d, placement_.workspace),
                                        static_cast<uint32_t>(out), outliers(run.tensors, in)});
      const bool quantized = is_ggml_dtype(run.dtype) || is_int_groups_dtype(run.dtype);
      used_[run.plugin->info().name].insert(quantized ? dtype_name(run.dtype) : "");
    }
    if (built.size() == 1)
      return std::make_unique<LinearLayer>(std::move(built.front().impl), std::move(built.front().outliers));
    return std::make_unique<LinearLayer>(std::move(built), rt_.max_step_tokens, staging_);
  }

  // The input-column group plugins.linear quantizes by ("group_size" in
  // plugins.linear_options, else the default its capabilities declare);
  // 1 when it has none.
  int64_t input_group() const {
    int64_t group = 1;
    try {
      const auto caps = nlohmann::json::parse(main_.info().capabilities);
      if (caps.contains("options") && caps["options"].contains("group_size"))
        group = caps["options"]["group_size"].get<int64_t>();
      const auto options = nlohmann::json::parse(cfg_.plugins.linear_options);
      if (options.contains("group_size")) group = options["group_size"].get<int64_t>();
    } catch (const nlohmann::json::exception&) {
      // The plugin itself reports malformed options when it is created.
    }
    return std::max<int64_t>(1, group);
  }
  const std::string& main_name() const { return main_.info().name; }

  // "linear.dense, linear.gguf (Q4_K, Q6_K)".
  std::string plugins_used() const {
    std::string out;
    for (const auto& [plugin, types] : used_) {
      std::string kinds;
      for (const std::string& t : types)
        if (!t.empty()) kinds += (kinds.empty() ? "" : ", ") + t;
      out += (out.empty() ? "" : ", ") + plugin + (kinds.empty() ? "" : " (" + kinds + ")");
    }
    return out;
  }

  // One line: the weights dequantized to F32 at load, by stored type, and
  // the bytes before and after.
  void log_dequantized() const {
    if (dequantized_.empty()) return;
    std::string what;
    uint64_t before = 0, after = 0;
    for (const auto& [type, d] : dequantized_) {
      what += (what.empty() ? "" : ", ") + type + " x " + std::to_string(d.num_tensors);
      before += d.bytes_before;
      after += d.bytes_after;
    }
    const std::string& blocks = cfg_.plugins.linear_blocks;
    const std::string why = blocks == "none" || blocks == cfg_.plugins.linear
                                 ? "plugins.linear_blocks: " + blocks
                                 : "neither " + cfg_.plugins.linear + " nor " + blocks + " computes on their type";
    spdlog::info("weights dequantized to F32 at load for {} ({}): {}; {} -> {} bytes ({:.1f} -> {:.1f} MiB)",
                 cfg_.plugins.linear, why, what, before, after, before / 1048576.0, after / 1048576.0);
  }

 private:
  struct Dequantized {
    size_t num_tensors = 0;
    uint64_t bytes_before = 0, bytes_after = 0;
  };

  llmk_linear_desc desc(const std::string& name, const void* weight, DType dtype, int64_t out, int64_t in,
                        bool outlives, const Plugin& plugin) const {
    llmk_linear_desc d{};
    d.struct_size = sizeof(d);
    d.name = name.c_str();
    d.in_features = static_cast<uint32_t>(in);
    d.out_features = static_cast<uint32_t>(out);
    d.weight_dtype = static_cast<uint32_t>(dtype);
    d.weight = weight;
    d.weight_outlives = outlives ? 1 : 0;
    d.max_rows = rt_.max_step_tokens;
    d.num_threads = rt_.num_threads;
    d.options = &plugin == &main_ ? cfg_.plugins.linear_options.c_str() : "{}";
    d.device = placement_.device;
    d.activation_dtype = LLMK_DTYPE_F32;
    return d;
  }

  // Whether `plugin` computes on t as stored: ggml blocks are offered only
  // to plugins built against linear API 3.1 or later.
  bool takes(const Plugin& plugin, const std::string& name, const TensorView& t) const {
    if (LLMK_API_VERSION_MINOR(plugin.info().api_version) < (is_int_groups_dtype(t.dtype) ? 2 : 1)) return false;
    const llmk_linear_desc d = desc(name, t.data, t.dtype, t.shape[0], t.shape[1], true, plugin);
    char why[256] = {0};
    return plugin.linear().supports(&d, why, sizeof(why)) != 0;
  }

  std::pair<const Plugin*, DType> choose(const std::string& name, const TensorView& t) {
    const bool int_groups = is_int_groups_dtype(t.dtype);
    if ((!is_ggml_dtype(t.dtype) && !int_groups) || takes(main_, name, t)) return {&main_, t.dtype};
    const std::string& blocks = cfg_.plugins.linear_blocks;
    if (blocks != "none" && blocks != cfg_.plugins.linear) {
      if (!blocks_) blocks_ = plugins_.load(blocks, LLMK_PLUGIN_LINEAR);
      if (takes(*blocks_, name, t)) return {&*blocks_, t.dtype};
    }
    // A GPTQ/AWQ weight's own plugin: linear.int4 for 4 bits, linear.uint8_zp for 8 (one group per row).
    const std::string own = t.dtype == DType::int4_groups ? "linear.int4" : "linear.uint8_zp";
    if (int_groups && blocks != "none" && own != cfg_.plugins.linear) {
      if (!own_.count(own)) own_.emplace(own, plugins_.load(own, LLMK_PLUGIN_LINEAR));
      if (takes(own_.at(own), name, t)) return {&own_.at(own), t.dtype};
    }
    Dequantized& d = dequantized_[dtype_name(t.dtype)];
    d.num_tensors += 1;
    d.bytes_before += t.nbytes();
    d.bytes_after += static_cast<uint64_t>(t.numel()) * 4;
    return {&main_, DType::f32};
  }

  // "<projection>.outlier_<part>" beside a "<projection>.weight".
  static std::string outlier_name(const TensorView& t, const char* part) {
    const std::string prefix = t.name.ends_with(".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
    return prefix + ".outlier_" + part;
  }

  // The SpQR-style outliers stored beside the tensors (core/gptq_checkpoint.hpp, checked there), their
  // rows one after another; nullptr when none has any.
  std::shared_ptr<const OutlierCsr> outliers(const std::vector<const TensorView*>& tensors, int64_t in) const {
    bool any = false;
    for (const TensorView* t : tensors) any = any || checkpoint_.has(outlier_name(*t, "row_ptr"));
    if (!any) return nullptr;
    auto csr = std::make_shared<OutlierCsr>();
    csr->in_features = in;
    csr->row_ptr.push_back(0);
    for (const TensorView* t : tensors) {
      const uint32_t base = csr->row_ptr.back();
      if (!checkpoint_.has(outlier_name(*t, "row_ptr"))) {
        csr->row_ptr.insert(csr->row_ptr.end(), static_cast<size_t>(t->shape[0]), base);
        continue;
      }
      const TensorView& rp = checkpoint_.tensor(outlier_name(*t, "row_ptr"));
      const TensorView& cols = checkpoint_.tensor(outlier_name(*t, "cols"));
      const TensorView& values = checkpoint_.tensor(outlier_name(*t, "values"));
      const auto* r = static_cast<const uint32_t*>(rp.data);
      for (int64_t n = 1; n < rp.numel(); ++n) csr->row_ptr.push_back(base + r[n]);
      const auto* c = static_cast<const uint32_t*>(cols.data);
      csr->cols.insert(csr->cols.end(), c, c + cols.numel());
      const auto* v = static_cast<const float*>(values.data);
      csr->values.insert(csr->values.end(), v, v + values.numel());
    }
    return csr;
  }

  // The tensors' rows one after another, as `dtype` (their own, or F32).
  static std::vector<uint8_t> stack(const std::vector<const TensorView*>& tensors, DType dtype) {
    size_t total = 0;
    for (const TensorView* t : tensors) total += dtype_bytes(dtype, t->numel());
    std::vector<uint8_t> out(total);
    size_t off = 0;
    for (const TensorView* t : tensors) {
      const size_t bytes = dtype_bytes(dtype, t->numel());
      if (dtype == t->dtype)
        std::memcpy(out.data() + off, t->data, bytes);
      else
        convert_to_f32(t->dtype, t->data, reinterpret_cast<float*>(out.data() + off), static_cast<size_t>(t->numel()));
      off += bytes;
    }
    return out;
  }

  const Checkpoint& checkpoint_;
  PluginRegistry& plugins_;
  const EngineConfig& cfg_;
  const ModelRuntime& rt_;
  const LinearPlacement& placement_;
  Plugin main_;
  std::optional<Plugin> blocks_;
  std::map<std::string, Plugin> own_;  // the plugins GPTQ/AWQ weights fall to
  std::shared_ptr<LinearWorkspace> staging_ = std::make_shared<LinearWorkspace>();
  std::map<std::string, Dequantized> dequantized_;
  std::map<std::string, std::set<std::string>> used_;  // plugin -> ggml types it serves ("" for float)
};

}  // namespace

size_t ModelWeights::bytes() const {
  size_t total = embed->nbytes() + final_norm.size() * 4;
  for (const auto& l : layers) {
    if (!l.qkv) continue;  // another pipeline stage's
    total += l.qkv->weight_bytes() + l.o->weight_bytes() + l.gate_up->weight_bytes() + l.down->weight_bytes() +
             (l.input_norm.size() + l.post_norm.size() + l.qkv_bias.size()) * 4;
  }
  // A tied head shares the embedding's bytes when borrowed; count what the plugin reports.
  if (lm_head) total += lm_head->weight_bytes();
  return total;
}

ModelWeights load_weights(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& ecfg,
                          const ModelRuntime& rt, const LinearPlacement& placement, const ModelShard* shard) {
  const ModelConfig& cfg = checkpoint.config();
  LinearBuilder linear(checkpoint, plugins, ecfg, rt, placement);
  ModelWeights w;
  w.slices = std::make_shared<TensorSlices>();
  const ModelShard whole = model_shard(cfg, 1, 1, 0);
  const ModelShard& s = shard != nullptr ? *shard : whole;
  const TensorShard& ts = s.tensor;
  const bool split = ts.degree > 1;
  const int64_t hd = cfg.head_dim;
  TensorSlices& cut = *w.slices;
  // A weight's output rows [first, first + count), or its input columns.
  auto rows = [&](const TensorView& t, int64_t first, int64_t count) {
    if (split && is_int_groups_dtype(t.dtype))
      throw Error(ErrorCode::unsupported, t.name + ": a GPTQ/AWQ weight is not cut for parallel.tensor");
    return split ? &cut.rows(t, first, count) : &t;
  };
  // A plugin that quantizes input columns in groups keeps its groups whole:
  // each rank's columns start and end on a group boundary, as at degree 1.
  const int64_t group = split ? linear.input_group() : 1;
  auto columns = [&](const TensorView& t, int64_t first, int64_t count) {
    if (split && !is_ggml_dtype(t.dtype) && (first % group != 0 || count % group != 0))
      throw Error(ErrorCode::invalid_config,
                  "parallel.tensor " + std::to_string(ts.degree) + " gives each rank " + std::to_string(count) +
                      " input columns of " + t.name + " [" + std::to_string(t.shape[0]) + " x " +
                      std::to_string(t.shape[1]) + "], which " + linear.main_name() + "'s groups of " +
                      std::to_string(group) + " do not divide (set a group_size in plugins.linear_options that "
                      "divides it, or another degree)");
    if (split && is_int_groups_dtype(t.dtype))
      throw Error(ErrorCode::unsupported, t.name + ": a GPTQ/AWQ weight is not cut for parallel.tensor");
    return split ? &cut.columns(t, first, count) : &t;
  };
  const int64_t q_first = ts.q_head_first * hd, q_count = ts.q_heads * hd;
  const int64_t kv_first = ts.kv_head_first * hd, kv_count = ts.kv_heads * hd;
  w.layers.resize(cfg.num_layers);
  for (int32_t i = s.layers.first; i < s.layers.last; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    auto t = [&](const char* name) -> const TensorView& { return checkpoint.tensor(p + name + ".weight"); };
    l.qkv = linear.make(p + "self_attn.qkv_proj", {rows(t("self_attn.q_proj"), q_first, q_count),
                                                   rows(t("self_attn.k_proj"), kv_first, kv_count),
                                                   rows(t("self_attn.v_proj"), kv_first, kv_count)});
    l.o = linear.make(p + "self_attn.o_proj", {columns(t("self_attn.o_proj"), q_first, q_count)});
    l.gate_up = linear.make(p + "mlp.gate_up_proj", {rows(t("mlp.gate_proj"), ts.inter_first, ts.inter_count),
                                                     rows(t("mlp.up_proj"), ts.inter_first, ts.inter_count)});
    l.down = linear.make(p + "mlp.down_proj", {columns(t("mlp.down_proj"), ts.inter_first, ts.inter_count)});
  }
  const TensorView& head = cfg.tie_word_embeddings && !checkpoint.has("lm_head.weight")
                               ? checkpoint.tensor("model.embed_tokens.weight")
                               : checkpoint.tensor("lm_head.weight");
  if (s.last_stage()) w.lm_head = linear.make("lm_head", {rows(head, ts.vocab_first, ts.vocab_count)});
  linear.log_dequantized();
  w.linear_plugins = linear.plugins_used();

  for (int32_t i = s.layers.first; i < s.layers.last; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.layers[i].input_norm = to_f32(checkpoint.tensor(p + "input_layernorm.weight"));
    w.layers[i].post_norm = to_f32(checkpoint.tensor(p + "post_attention_layernorm.weight"));
    if (cfg.attention_bias) {
      std::vector<float>& bias = w.layers[i].qkv_bias;
      for (const auto& [part, first, count] : {std::tuple{"q_proj", q_first, q_count},
                                               std::tuple{"k_proj", kv_first, kv_count},
                                               std::tuple{"v_proj", kv_first, kv_count}}) {
        const std::vector<float> b = to_f32(checkpoint.tensor(p + "self_attn." + part + ".bias"));
        bias.insert(bias.end(), b.begin() + first, b.begin() + first + count);
      }
    }
  }
  w.final_norm = to_f32(checkpoint.tensor("model.norm.weight"));
  w.embed = rows(checkpoint.tensor("model.embed_tokens.weight"), ts.vocab_first, ts.vocab_count);
  w.embed_first = ts.vocab_first;
  const DType e = w.embed->dtype;
  const bool decodable = is_ggml_dtype(e) && ggml_type_info(ggml_type_of(e)) != nullptr &&
                         ggml_type_info(ggml_type_of(e))->can_dequantize;
  if (e != DType::f32 && e != DType::f16 && e != DType::bf16 && !decodable)
    throw Error(ErrorCode::unsupported, "model.embed_tokens.weight has dtype " + std::string(dtype_name(e)));
  return w;
}

namespace {

// out[t, :] = rows ids[0..n) of the table, decoded to f32.
void table_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.shape[1];
  if (!is_ggml_dtype(table.dtype)) {
    kernels::cpu::embedding(table.data, static_cast<llmk_dtype>(table.dtype), dim, ids, n, out);
    return;
  }
  const size_t row_bytes = dtype_bytes(table.dtype, dim);
  const auto type = static_cast<GgmlType>(ggml_type_of(table.dtype));
  const auto* rows = static_cast<const uint8_t*>(table.data);
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t t = 0; t < n; ++t) dequantize_ggml(type, rows + row_bytes * static_cast<size_t>(ids[t]), out + t * dim, dim);
}

}  // namespace

void embed_rows(const TensorView& table, const int32_t* ids, int64_t n, float* out, int64_t first) {
  const int64_t rows = table.shape[0], dim = table.shape[1];
  bool inside = true;
  for (int64_t t = 0; t < n && inside; ++t) inside = ids[t] >= first && ids[t] < first + rows;
  if (inside && first == 0) return table_rows(table, ids, n, out);
  // The table's own row numbers; ids of other ranks' rows read row 0, then become zeros.
  std::vector<int32_t> local(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const bool here = ids[t] >= first && ids[t] < first + rows;
    local[static_cast<size_t>(t)] = here ? static_cast<int32_t>(ids[t] - first) : 0;
  }
  table_rows(table, local.data(), n, out);
  if (inside) return;
  for (int64_t t = 0; t < n; ++t)
    if (ids[t] < first || ids[t] >= first + rows) std::fill(out + t * dim, out + (t + 1) * dim, 0.0f);
}

}  // namespace llmk
