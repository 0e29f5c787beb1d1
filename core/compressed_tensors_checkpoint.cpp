#include "core/compressed_tensors_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/int_groups.hpp"
#include "core/model_config.hpp"
#include "core/raw_safetensors.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail_tensor(const fs::path& file, const std::string& name, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": tensor '" + name + "': " + what);
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::not_found, file.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(ErrorCode::bad_checkpoint, file.string() + ": not a JSON object");
  return j;
}

// A float tensor's values as f32 (F32, F16 or BF16).
std::vector<float> floats(const fs::path& file, const std::string& name, const RawEntry& e) {
  DType dtype;
  if (!parse_safetensors_dtype(e.dtype, dtype)) fail_tensor(file, name, "dtype " + e.dtype + ", expected F32, F16 or BF16");
  std::vector<float> v(e.bytes / dtype_size(dtype));
  convert_to_f32(dtype, e.data, v.data(), v.size());
  return v;
}

// Integer values of an I8 / I32 / I64 tensor.
std::vector<int64_t> integers(const fs::path& file, const std::string& name, const RawEntry& e) {
  std::vector<int64_t> v;
  if (e.dtype == "I8") {
    for (size_t i = 0; i < e.bytes; ++i) v.push_back(static_cast<int8_t>(e.data[i]));
  } else if (e.dtype == "I32") {
    for (size_t i = 0; i < e.bytes / 4; ++i) {
      int32_t x;
      std::memcpy(&x, e.data + 4 * i, 4);
      v.push_back(x);
    }
  } else if (e.dtype == "I64") {
    for (size_t i = 0; i < e.bytes / 8; ++i) {
      int64_t x;
      std::memcpy(&x, e.data + 8 * i, 8);
      v.push_back(x);
    }
  } else {
    fail_tensor(file, name, "dtype " + e.dtype + ", expected an integer type");
  }
  return v;
}

// Value i of a packed int32 row (bits per value; stored + 2^(bits-1)).
int64_t unpack(const int32_t* words, int64_t i, int bits) {
  const int per = 32 / bits;
  const auto w = static_cast<uint32_t>(words[i / per]);
  return static_cast<int64_t>((w >> (bits * (i % per))) & ((1u << bits) - 1)) - (int64_t{1} << (bits - 1));
}

struct Scheme {
  std::string format;
  int bits = 0;
  bool symmetric = true;
  std::string strategy;
  int64_t group_size = 0;
};

class CompressedTensorsCheckpoint final : public Checkpoint {
 public:
  explicit CompressedTensorsCheckpoint(const fs::path& dir) {
    source_ = dir.string();
    const fs::path config_file = dir / "config.json";
    json cfg = read_json(config_file);
    scheme_ = scheme_of(cfg.at("quantization_config"), config_file);
    cfg.erase("quantization_config");
    config_ = parse_model_config_json(cfg.dump(), config_file.string());
    apply_folder_configs(config_, dir);
    if (fs::exists(dir / "model.safetensors.index.json"))
      throw Error(ErrorCode::unsupported, (dir / "model.safetensors.index.json").string() +
                                              ": sharded compressed-tensors checkpoints are not supported");
    file_ = std::make_unique<MappedFile>(dir / "model.safetensors");
    const auto entries = read_raw_entries(*file_);
    const fs::path& file = file_->path();
    for (const auto& [name, want] : expected_tensors(config_)) {
      const std::string base = name.substr(0, name.size() - 6);  // without "weight"
      const bool quantized = entries.count(base + "weight_scale") || entries.count(base + "weight_packed") ||
                             (entries.count(name) && entries.at(name).dtype == "I8");
      if (ends_with(name, ".weight") && quantized) {
        const Integers ints = integers_of(file, entries, base, name, want);
        if (scheme_.format == "pack-quantized" && scheme_.bits == 4 && want[1] % ints.group == 0) {
          for (const int64_t z : ints.zero)
            if (z < -8 || z > 7)
              fail_tensor(file, base + "weight_zero_point", "zero point " + std::to_string(z) + " is outside -8..7 (4 bits)");
          adopt_groups(name, int4_groups(ints, want), want);
        }
        else
          adopt(name, dequantize(ints, want), want);
        continue;
      }
      auto it = entries.find(name);
      if (it == entries.end()) fail_tensor(file, name, "missing");
      if (it->second.shape != want) fail_tensor(file, name, "shape does not match the config");
      adopt(name, floats(file, name, it->second), want);
    }
    tokenizer_path_ = find_tokenizer(dir);
  }

 private:
  static bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }

  static Scheme scheme_of(const json& q, const fs::path& config_file) {
    auto refuse = [&](const std::string& what) {
      throw Error(ErrorCode::unsupported, config_file.string() + ": quantization_config." + what);
    };
    Scheme s;
    s.format = q.value("format", "");
    if (s.format != "pack-quantized" && s.format != "naive-quantized" && s.format != "int-quantized")
      refuse("format '" + s.format + "' is not supported (pack-quantized, int-quantized, naive-quantized)");
    if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1)
      refuse("config_groups must hold exactly one group");
    const json& w = q["config_groups"].begin().value().value("weights", json::object());
    if (w.value("type", "int") != "int") refuse("config_groups weights.type must be int");
    s.bits = w.value("num_bits", 0);
    s.symmetric = w.value("symmetric", true);
    s.strategy = w.value("strategy", "");
    s.group_size = w.contains("group_size") && w["group_size"].is_number_integer() ? w["group_size"].get<int64_t>() : 0;
    if (s.bits != 4 && s.bits != 8) refuse("config_groups weights.num_bits " + std::to_string(s.bits) + " (4 or 8)");
    if (s.format != "pack-quantized" && s.bits != 8) refuse(s.format + " with num_bits 4 (8 only)");
    if (s.strategy != "channel" && s.strategy != "group" && s.strategy != "tensor")
      refuse("config_groups weights.strategy '" + s.strategy + "' (channel, group, tensor)");
    if (s.strategy == "group" && s.group_size <= 0) refuse("config_groups weights.group_size must be positive");
    // Activations quantized per token at run time (W8A8's dynamic scheme)
    // are the linear plugin's business (linear.int8 does so); calibrated
    // static scales (input_scale tensors) would be dropped, so they are refused.
    const json& a = q["config_groups"].begin().value().value("input_activations", json());
    if (a.is_object() && !a.value("dynamic", true))
      refuse("config_groups input_activations: dynamic false (static activation scales, input_scale) is not "
             "supported; dynamic per-token activations are (plugins.linear: linear.int8)");
    return s;
  }

  // A weight's integers as stored: q [out, in] and zero [scale_rows, num_groups] signed, and the scales.
  struct Integers {
    std::vector<int64_t> q, zero;
    std::vector<float> scale;
    int64_t group = 0, num_groups = 0;
    bool per_tensor = false;  // one scale and zero point for every row
  };

  Integers integers_of(const fs::path& file, const std::map<std::string, RawEntry>& entries, const std::string& base,
                       const std::string& name, const std::vector<int64_t>& want) {
    const int64_t out = want[0], in = want[1];
    const int64_t group = scheme_.strategy == "group" ? scheme_.group_size : in;
    const int64_t num_groups = scheme_.strategy == "tensor" ? 1 : (in + group - 1) / group;
    const int64_t scale_rows = scheme_.strategy == "tensor" ? 1 : out;
    auto scale_entry = entries.find(base + "weight_scale");
    if (scale_entry == entries.end()) fail_tensor(file, name, "missing '" + base + "weight_scale'");
    const std::vector<float> scale = floats(file, scale_entry->first, scale_entry->second);
    if (static_cast<int64_t>(scale.size()) != scale_rows * num_groups)
      fail_tensor(file, base + "weight_scale", std::to_string(scale.size()) + " scales, expected " +
                                                   std::to_string(scale_rows * num_groups));
    std::vector<int64_t> q(static_cast<size_t>(out * in));
    if (scheme_.format == "pack-quantized") {
      auto shape = entries.find(base + "weight_shape");
      if (shape == entries.end()) fail_tensor(file, name, "missing '" + base + "weight_shape'");
      if (integers(file, shape->first, shape->second) != want)
        fail_tensor(file, base + "weight_shape", "does not match the config's shape");
      auto packed = entries.find(base + "weight_packed");
      if (packed == entries.end()) fail_tensor(file, name, "missing '" + base + "weight_packed'");
      const int64_t words = (in * scheme_.bits + 31) / 32;
      if (packed->second.dtype != "I32" || static_cast<int64_t>(packed->second.bytes) != out * words * 4)
        fail_tensor(file, packed->first, packed->second.dtype + " of " + std::to_string(packed->second.bytes) +
                                             " bytes, expected I32 [" + std::to_string(out) + ", " +
                                             std::to_string(words) + "]");
      const auto* w = reinterpret_cast<const int32_t*>(packed->second.data);
      for (int64_t n = 0; n < out; ++n)
        for (int64_t k = 0; k < in; ++k) q[n * in + k] = unpack(w + n * words, k, scheme_.bits);
    } else {
      const RawEntry& e = entries.count(name) ? entries.at(name) : entries.at(base + "weight_scale");
      if (!entries.count(name) || e.dtype != "I8" || static_cast<int64_t>(e.bytes) != out * in)
        fail_tensor(file, name, "expected I8 [" + std::to_string(out) + ", " + std::to_string(in) + "]");
      q = integers(file, name, e);
    }
    std::vector<int64_t> zero(static_cast<size_t>(scale_rows * num_groups), 0);
    auto z = entries.find(base + "weight_zero_point");
    if (!scheme_.symmetric) {
      if (z == entries.end()) fail_tensor(file, name, "missing '" + base + "weight_zero_point' (asymmetric)");
      const std::vector<int64_t> raw = integers(file, z->first, z->second);
      if (scheme_.format == "pack-quantized" && scheme_.strategy != "tensor") {  // packed along the outputs
        const int64_t rows = (scale_rows * scheme_.bits + 31) / 32;
        if (z->second.dtype != "I32" || static_cast<int64_t>(raw.size()) != rows * num_groups)
          fail_tensor(file, z->first, "expected I32 [" + std::to_string(rows) + ", " + std::to_string(num_groups) + "]");
        std::vector<int32_t> col(static_cast<size_t>(rows));
        for (int64_t g = 0; g < num_groups; ++g) {
          for (int64_t r = 0; r < rows; ++r) col[r] = static_cast<int32_t>(raw[r * num_groups + g]);
          for (int64_t n = 0; n < scale_rows; ++n) zero[n * num_groups + g] = unpack(col.data(), n, scheme_.bits);
        }
      } else {
        if (raw.size() != zero.size())
          fail_tensor(file, z->first, std::to_string(raw.size()) + " zero points, expected " + std::to_string(zero.size()));
        zero = raw;
      }
    }
    return Integers{std::move(q), std::move(zero), scale, group, num_groups, scheme_.strategy == "tensor"};
  }

  static std::vector<float> dequantize(const Integers& w, const std::vector<int64_t>& want) {
    const int64_t out = want[0], in = want[1];
    std::vector<float> v(w.q.size());
    for (int64_t n = 0; n < out; ++n)
      for (int64_t k = 0; k < in; ++k) {
        const int64_t at = (w.per_tensor ? 0 : n * w.num_groups) + k / w.group;
        v[n * in + k] = static_cast<float>(w.q[n * in + k] - w.zero[at]) * w.scale[at];
      }
    return v;
  }

  // 4-bit pack-quantized as linear API 3.2's integer groups (core/int_groups.hpp), exactly: stored q + 8 and
  // zero point + 8 are both 0..15, and (q + 8) - (zero + 8) is the format's q - zero; a per-tensor scale
  // repeats on every row. Needs group_size to divide in_features.
  static std::unique_ptr<IntGroupsWeight> int4_groups(const Integers& w, const std::vector<int64_t>& want) {
    const int64_t out = want[0], in = want[1];
    auto g = std::make_unique<IntGroupsWeight>(4, static_cast<uint32_t>(w.group), static_cast<uint32_t>(out),
                                               static_cast<uint32_t>(in));
    for (int64_t n = 0; n < out; ++n) {
      for (int64_t j = 0; j < w.num_groups; ++j) {
        const int64_t at = (w.per_tensor ? 0 : n * w.num_groups) + j;
        g->scales[static_cast<size_t>(n * w.num_groups + j)] = w.scale[at];
        g->zeros[static_cast<size_t>(n * w.num_groups + j)] = static_cast<uint8_t>(w.zero[at] + 8);
      }
      for (int64_t k = 0; k < in; ++k) g->set_q(n, k, static_cast<uint32_t>(w.q[n * in + k] + 8));
    }
    return g;
  }

  void adopt_groups(const std::string& name, std::unique_ptr<IntGroupsWeight> w, const std::vector<int64_t>& shape) {
    TensorView v;
    v.name = name;
    v.dtype = DType::int4_groups;
    v.shape = shape;
    v.data = w->header();
    groups_.push_back(std::move(w));
    tensors_.emplace(name, std::move(v));
  }

  void adopt(const std::string& name, std::vector<float> values, const std::vector<int64_t>& shape) {
    owned_.push_back(std::move(values));
    TensorView v;
    v.name = name;
    v.dtype = DType::f32;
    v.shape = shape;
    v.data = owned_.back().data();
    tensors_.emplace(name, std::move(v));
  }

  Scheme scheme_;
  std::unique_ptr<MappedFile> file_;
  std::vector<std::vector<float>> owned_;
  std::vector<std::unique_ptr<IntGroupsWeight>> groups_;  // 4-bit pack-quantized weights as stored
};

}  // namespace

bool is_compressed_tensors_checkpoint(const fs::path& model_dir) {
  const fs::path config = model_dir / "config.json";
  if (!fs::is_regular_file(config)) return false;
  std::ifstream in(config);
  const json j = json::parse(in, nullptr, false);
  return j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object() &&
         j["quantization_config"].value("quant_method", "") == "compressed-tensors";
}

std::unique_ptr<Checkpoint> load_compressed_tensors_checkpoint(const fs::path& model_dir) {
  return std::make_unique<CompressedTensorsCheckpoint>(model_dir);
}

}  // namespace llmk
