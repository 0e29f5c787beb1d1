// llmk info: what a model is (architecture, shape, special tokens) and what
// it costs (parameters, weight bytes, the KV dtype the engine would use, KV
// bytes per token and per sequence).
// Safetensors checkpoints are fully validated (mapped, not read); dummy
// presets are described without generating weights.
//
// --linear NAME (repeatable; "all" = every linear plugin found) adds the
// weight bytes of the model with that linear plugin, as the plugin stores
// them: the model's linears are built (quantized) from the weights, so this
// reads every weight (and generates dummy ones). The configured
// plugins.linear_options apply to the configured plugins.linear; other
// plugins run with their defaults. Each plugin builds every weight (a GGUF
// file's blocks too, dequantized for a plugin that does not take them); one
// that cannot serve the model (linear.gguf on float weights) is listed with
// its reason.
//
// With parallel.tensor or parallel.pipeline above 1 (--set, no mpirun
// needed) it adds each rank's share: its stage's layers, heads, MLP columns
// and vocabulary rows (core/parallel.hpp), the bytes of the checkpoint's
// tensors as the rank keeps them, in their stored dtypes
// (core/shard_footprint.hpp), and its KV bytes per token and for the
// configured capacity. A degree the engine refuses is refused with its error.
// --linear still reports the whole model, under each plugin.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/built_executors.hpp"
#include "apps/command.hpp"
#include "apps/model_options.hpp"
#include "core/checkpoint.hpp"
#include "core/error.hpp"
#include "core/executor.hpp"
#include "core/hw_probe.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"
#include "core/plugin_loader.hpp"
#include "core/shard_footprint.hpp"
#include "kernels/cpu/hadamard.hpp"

namespace llmk::app {
namespace {

using json = nlohmann::ordered_json;

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

// A float as the shortest decimal that reads back as the same float (1e-05, not 9.99999974e-06).
double shortest(float value) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), value);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string human_count(double n) {
  const char* units[] = {"", " K", " M", " B"};
  int u = 0;
  while (n >= 1000.0 && u < 3) {
    n /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.2f%s", n, units[u]);
  return buf;
}

// Each rank's share of a tensor x pipeline job (cfg.parallel).
json parallel_ranks(const EngineConfig& cfg, const ModelConfig& mc, const std::map<std::string, TensorView>& tensors,
                    const std::string& format) {
  const auto tp = static_cast<int32_t>(cfg.parallel.tensor), pp = static_cast<int32_t>(cfg.parallel.pipeline);
  const KvDtypeChoice kv = resolve_kv_dtype(cfg, mc, format);
  const uint32_t group = cfg.kv_cache.group_size;
  // The job's slot count is the whole model's (every rank holds its share of
  // each slot): the CPU executor's, from this machine's memory.
  const uint32_t slots = resolve_runtime(cfg, mc, format, static_cast<uint64_t>(physical_memory_bytes())).num_kv_slots;
  json ranks = json::array();
  for (int32_t rank = 0; rank < tp * pp; ++rank) {
    const ModelShard shard = model_shard(mc, tp, pp, rank);
    const ModelConfig local = local_model_config(mc, shard);
    const ShardWeights w = shard_weights(mc, shard, tensors);
    const TensorShard& t = shard.tensor;
    const uint64_t kv_per_token = standard_kv_bytes_per_token(local, kv.dtype, group);
    ranks.push_back({{"rank", rank},
                     {"stage", shard.stage},
                     {"tensor_rank", t.rank},
                     {"layers", {shard.layers.first, shard.layers.last}},
                     {"q_heads", {t.q_head_first, t.q_head_first + t.q_heads}},
                     {"kv_heads", {t.kv_head_first, t.kv_head_first + t.kv_heads}},
                     {"mlp_columns", {t.inter_first, t.inter_first + t.inter_count}},
                     {"vocab_rows", {t.vocab_first, t.vocab_first + t.vocab_count}},
                     {"num_parameters", w.num_params},
                     {"weight_bytes", w.bytes},
                     {"kv_bytes_per_token", kv_per_token},
                     {"kv_bytes", kv_per_token * slots}});
  }
  return {{"tensor", tp},
          {"pipeline", pp},
          {"weight_bytes_from", "the checkpoint's tensors as each rank keeps them, in their stored dtypes"},
          {"kv_dtype", dtype_name(kv.dtype)},
          {"kv_slots", slots},
          {"ranks", ranks}};
}

json describe(const EngineConfig& cfg) {
  const std::string format = resolve_load_format(cfg.model);
  ModelConfig mc;
  json out;
  int64_t weight_bytes = 0, counted_parameters = 0;
  std::set<std::string> dtypes;
  std::string tokenizer;
  std::map<std::string, TensorView> tensors;  // shapes and dtypes only
  if (format == "dummy") {
    mc = resolve_model_config(cfg.model);
    tensors = dummy_tensors(mc);
    for (const auto& [name, shape] : expected_tensors(mc)) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      counted_parameters += n;
      weight_bytes += n * static_cast<int64_t>(dtype_size(mc.dtype));
    }
    dtypes.insert(dtype_name(mc.dtype));
    out["source"] = "dummy preset " + cfg.model.preset + " seed " + std::to_string(cfg.model.seed);
    try {
      tokenizer = cfg.model.tokenizer.empty() ? default_tokenizer_path().string() : cfg.model.tokenizer;
    } catch (const Error&) {
      tokenizer = "";  // not needed to describe the model
    }
  } else {
    const auto checkpoint = open_model(cfg.model);
    mc = checkpoint->config();
    for (const auto& [name, t] : checkpoint->tensors()) {
      counted_parameters += t.numel();
      dtypes.insert(dtype_name(t.dtype));
    }
    weight_bytes = static_cast<int64_t>(checkpoint->total_bytes());
    tensors = checkpoint->tensors();
    out["source"] = checkpoint->source();
    tokenizer = checkpoint->tokenizer_path().string();
  }
  // config.json's spelling; a GGUF file's per-frequency divisors as a list.
  auto rope_scaling_json = [&](const RopeScaling& r) -> json {
    json j = nullptr;
    if (r.type == RopeScalingType::linear) j = {{"rope_type", "linear"}, {"factor", shortest(r.factor)}};
    if (r.type == RopeScalingType::llama3)
      j = {{"rope_type", "llama3"},
           {"factor", shortest(r.factor)},
           {"low_freq_factor", shortest(r.low_freq_factor)},
           {"high_freq_factor", shortest(r.high_freq_factor)},
           {"original_max_position_embeddings", r.original_max_position_embeddings}};
    if (!r.freq_factors.empty()) {
      if (j.is_null()) j = json::object();
      j["freq_factors"] = r.freq_factors;
    }
    return j;
  };
  const int32_t group = static_cast<int32_t>(cfg.kv_cache.group_size);
  const int64_t max_len = cfg.kv_cache.max_seq_len ? cfg.kv_cache.max_seq_len : mc.max_position_embeddings;

  out["load_format"] = format;
  out["architecture"] = mc.architecture;
  out["config"] = {
      {"hidden_size", mc.hidden_size},
      {"intermediate_size", mc.intermediate_size},
      {"num_hidden_layers", mc.num_layers},
      {"num_attention_heads", mc.num_heads},
      {"num_key_value_heads", mc.num_kv_heads},
      {"head_dim", mc.head_dim},
      {"vocab_size", mc.vocab_size},
      {"max_position_embeddings", mc.max_position_embeddings},
      {"rms_norm_eps", shortest(mc.rms_norm_eps)},
      {"rope_theta", shortest(mc.rope_theta)},
      {"tie_word_embeddings", mc.tie_word_embeddings},
      {"torch_dtype", dtype_name(mc.dtype)},
      {"bos_token_id", mc.bos_token_id},
      {"eos_token_id", mc.eos_token_ids},
      {"add_bos_token", mc.add_bos_token},
      {"sliding_window", mc.sliding_window ? json(*mc.sliding_window) : json(nullptr)},
      {"attention_bias", mc.attention_bias},
      {"rope_scaling", rope_scaling_json(mc.rope_scaling)},
  };
  out["num_parameters"] = mc.num_parameters();
  out["num_parameters_in_tensors"] = counted_parameters;
  out["weight_bytes"] = weight_bytes;
  std::string dtype_list;
  for (const auto& d : dtypes) dtype_list += (dtype_list.empty() ? "" : "+") + d;
  out["weight_dtype"] = dtype_list;
  const KvDtypeChoice kv = resolve_kv_dtype(cfg, mc, format);
  out["kv_dtype"] = dtype_name(kv.dtype);
  out["kv_dtype_reason"] = kv.reason;
  out["kv_group_size"] = group;
  // An i8 cache holds keys rotated over this Hadamard block (0: not rotated).
  const int64_t rotation = kernels::cpu::largest_pow2_divisor(mc.head_dim);
  out["kv_i8_key_rotation"] = cfg.kv_cache.rotate_keys && rotation > 1 ? rotation : 0;
  out["kv_bytes_per_token"] = {{"f32", mc.kv_bytes_per_token(DType::f32)},
                               {"f16", mc.kv_bytes_per_token(DType::f16)},
                               {"i8", mc.kv_bytes_per_token(DType::i8, group)}};
  out["max_seq_len"] = max_len;
  out["kv_bytes_per_sequence"] = {{"f32", mc.kv_bytes_per_token(DType::f32) * max_len},
                                  {"f16", mc.kv_bytes_per_token(DType::f16) * max_len},
                                  {"i8", mc.kv_bytes_per_token(DType::i8, group) * max_len}};
  out["tokenizer"] = tokenizer;
  if (cfg.parallel.tensor * cfg.parallel.pipeline > 1) out["parallel"] = parallel_ranks(cfg, mc, tensors, format);
  return out;
}

// "all": every linear plugin found that serves the configured device.
std::vector<std::string> linear_plugin_names(PluginRegistry& registry, const std::vector<std::string>& requested,
                                             const std::string& device) {
  std::vector<std::string> names;
  for (const auto& r : requested) {
    if (r != "all") {
      names.push_back(r);
      continue;
    }
    for (const auto& f : registry.discover())
      if (f.usable() && f.info.kind == LLMK_PLUGIN_LINEAR && plugin_serves_device(f.info, device) &&
          std::find(names.begin(), names.end(), f.info.name) == names.end())
        names.push_back(f.info.name);  // once, whatever CPU levels it was built for
  }
  return names;
}

// Weight bytes of the model under each linear plugin in `requested`.
json linear_modes(const EngineConfig& cfg, const std::vector<std::string>& requested) {
  PluginRegistry registry(std::vector<std::filesystem::path>(cfg.plugins.search_path.begin(),
                                                             cfg.plugins.search_path.end()));
  const auto checkpoint = open_model(cfg.model);
  json out = json::array();
  for (const auto& name : linear_plugin_names(registry, requested, cfg.executor.device)) {
    EngineConfig c = cfg;
    c.plugins.linear = name;
    c.plugins.linear_blocks = "none";  // this plugin for every weight, a GGUF file's blocks included
    if (name != cfg.plugins.linear) c.plugins.linear_options = "{}";
    // Only the weights matter here: the smallest KV cache and step.
    c.kv_cache.capacity_tokens = 1;
    c.scheduler.max_num_batched_tokens = 1;
    // The whole model's bytes: the ranks' shares are in "parallel" (stored dtypes).
    c.parallel = ParallelSection{};
    register_built_executors();
    // A plugin that cannot serve these weights (linear.gguf on float
    // weights) is listed with its reason.
    try {
      const auto executor = make_executor(c, checkpoint, registry);
      out.push_back({{"plugin", name}, {"options", json::parse(c.plugins.linear_options)},
                     {"weight_bytes", executor->weight_bytes()}});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::plugin) throw;
      out.push_back({{"plugin", name}, {"options", json::parse(c.plugins.linear_options)}, {"refused", e.what()}});
    }
  }
  return out;
}

void print_text(const json& d) {
  auto line = [](const std::string& key, const std::string& value) {
    std::printf("%-28s %s\n", key.c_str(), value.c_str());
  };
  auto plain = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  line("source", plain(d["source"]) + " (" + plain(d["load_format"]) + ")");
  line("architecture", plain(d["architecture"]));
  for (const auto& [key, value] : d["config"].items()) line("  " + key, plain(value));
  line("parameters", plain(d["num_parameters"]) + " (" + human_count(d["num_parameters"].get<double>()) + ")");
  line("weights", human_bytes(d["weight_bytes"].get<double>()) + " (" + plain(d["weight_bytes"]) + " bytes, " +
                      plain(d["weight_dtype"]) + ")");
  const auto& per_token = d["kv_bytes_per_token"];
  const auto& per_seq = d["kv_bytes_per_sequence"];
  if (d.contains("linear"))
    for (const auto& m : d["linear"]) {
      const std::string options = m["options"].empty() ? "" : " " + m["options"].dump();
      if (m.contains("refused")) {
        line("weights, " + plain(m["plugin"]), "cannot serve this model: " + plain(m["refused"]));
        continue;
      }
      line("weights, " + plain(m["plugin"]),
           human_bytes(m["weight_bytes"].get<double>()) + " (" + plain(m["weight_bytes"]) + " bytes" + options + ")");
    }
  line("kv dtype", plain(d["kv_dtype"]) + " (" + plain(d["kv_dtype_reason"]) + ")");
  line("kv per token, f32", plain(per_token["f32"]) + " bytes");
  line("kv per token, f16", plain(per_token["f16"]) + " bytes");
  line("kv per token, i8 (group " + plain(d["kv_group_size"]) + ")", plain(per_token["i8"]) + " bytes");
  line("kv i8 keys rotated", d["kv_i8_key_rotation"] == 0 ? std::string("no")
                                                           : "Hadamard block " + plain(d["kv_i8_key_rotation"]));
  line("kv per " + plain(d["max_seq_len"]) + "-token seq, f32", human_bytes(per_seq["f32"].get<double>()));
  line("kv per " + plain(d["max_seq_len"]) + "-token seq, f16", human_bytes(per_seq["f16"].get<double>()));
  line("kv per " + plain(d["max_seq_len"]) + "-token seq, i8", human_bytes(per_seq["i8"].get<double>()));
  line("tokenizer", d["tokenizer"].get<std::string>().empty() ? "(none found)" : plain(d["tokenizer"]));
  if (!d.contains("parallel")) return;
  const auto& p = d["parallel"];
  line("parallel", "tensor " + plain(p["tensor"]) + " x pipeline " + plain(p["pipeline"]) + "; kv " +
                       plain(p["kv_dtype"]) + ", " + plain(p["kv_slots"]) + " slots");
  auto range = [&](const json& r) { return "[" + plain(r[0]) + ", " + plain(r[1]) + ")"; };
  for (const auto& r : p["ranks"]) {
    line("  rank " + plain(r["rank"]), "stage " + plain(r["stage"]) + " layers " + range(r["layers"]) +
                                           ", tensor rank " + plain(r["tensor_rank"]) + ": query heads " +
                                           range(r["q_heads"]) + ", KV heads " + range(r["kv_heads"]) +
                                           ", MLP columns " + range(r["mlp_columns"]) + ", vocabulary rows " +
                                           range(r["vocab_rows"]));
    line("", "weights " + human_bytes(r["weight_bytes"].get<double>()) + " (" + plain(r["weight_bytes"]) +
                 " bytes), kv " + plain(r["kv_bytes_per_token"]) + " bytes per token, " +
                 human_bytes(r["kv_bytes"].get<double>()) + " for the slots");
  }
}

const CommandRegistration kInfo{
    "info", "Describe a model: shape, parameters, weight and KV-cache sizes", [](CLI::App& cmd) {
      auto options = std::make_shared<ModelOptions>();
      auto as_json = std::make_shared<bool>(false);
      auto linear = std::make_shared<std::vector<std::string>>();
      add_model_options(cmd, *options);
      cmd.add_flag("--json", *as_json, "print one JSON object");
      cmd.add_option("--linear", *linear,
                     "also report the weight bytes with this linear plugin, e.g. linear.int4 (repeatable; all = every "
                     "one found); builds the model's linears");
      return std::function<int()>([options, as_json, linear] {
        const EngineConfig cfg = build_engine_config(*options);
        json d = describe(cfg);
        if (!linear->empty()) d["linear"] = linear_modes(cfg, *linear);
        if (*as_json) {
          std::cout << d.dump(2) << "\n";
        } else {
          print_text(d);
        }
        return 0;
      });
    }};

}  // namespace
}  // namespace llmk::app
