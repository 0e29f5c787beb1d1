#include "core/gptq_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/int_groups.hpp"
#include "core/safetensors.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw Error(ErrorCode::bad_checkpoint, file.string() + ": not valid JSON: " + e.what());
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

QuantizedFormat parse_format(const json& q, const fs::path& file) {
  auto fail = [&](const std::string& what) { throw Error(ErrorCode::unsupported, file.string() + ": " + what); };
  if (!q.is_object()) fail("the quantization config is not an object");
  QuantizedFormat f;
  f.method = q.value("quant_method", std::string("gptq"));
  if (f.method != "gptq" && f.method != "awq") fail("quant_method '" + f.method + "' is not gptq or awq");
  auto number = [&](const char* key, int fallback) {
    if (!q.contains(key)) return fallback;
    if (!q.at(key).is_number_integer()) fail(std::string(key) + " is not an integer");
    return q.at(key).get<int>();
  };
  f.bits = number("bits", number("w_bit", 4));
  f.group_size = number("group_size", number("q_group_size", 128));
  f.desc_act = q.value("desc_act", false);
  const std::string format = q.value("checkpoint_format", std::string("gptq"));
  if (format != "gptq" && format != "gptq_v2") fail("checkpoint_format '" + format + "' is not gptq or gptq_v2");
  f.v2 = format == "gptq_v2";
  if (f.method == "gptq" && f.bits != 4 && f.bits != 8) fail("bits " + std::to_string(f.bits) + " (GPTQ: 4 or 8)");
  if (f.method == "awq") {
    if (f.bits != 4) fail("bits " + std::to_string(f.bits) + " (AWQ: 4)");
    const std::string version = q.value("version", std::string("gemm"));
    if (version != "gemm" && version != "GEMM") fail("AWQ version '" + version + "' (only the GEMM packing)");
    if (!q.value("zero_point", true)) fail("AWQ without zero points is not supported");
  }
  if (f.group_size <= 0 && f.group_size != -1) fail("group_size " + std::to_string(f.group_size));
  if (q.contains("outliers")) {
    const json& o = q.at("outliers");
    if (!o.is_object()) fail("outliers is not an object");
    if (o.contains("format") && o.at("format") != "csr") fail("outliers format " + o.at("format").dump() + " (only \"csr\")");
    f.outliers = true;
  }
  return f;
}

struct Found {
  const SafetensorsFile* file;
  const SafetensorsEntry* entry;
};

class QuantizedCheckpoint final : public Checkpoint {
 public:
  QuantizedCheckpoint(const fs::path& model_dir, const QuantizedFormat& format);

 private:
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    const auto it = found_.find(name);
    const std::string file = it != found_.end() ? it->second.file->path().string() : source_;
    throw Error(ErrorCode::bad_checkpoint, file + ": tensor '" + name + "': " + what);
  }
  const Found& need(const std::string& name, DType dtype_class, const std::vector<int64_t>& shape,
                    const std::string& why);
  void open(const fs::path& model_dir);
  void adopt_plain(const std::string& name, const std::vector<int64_t>& shape);
  void adopt_quantized(const std::string& prefix, const std::vector<int64_t>& shape);
  void adopt_outliers(const std::string& prefix, int64_t out, int64_t in);
  std::vector<float> floats(const Found& f) const;
  std::vector<int32_t> ints(const Found& f) const;

  QuantizedFormat format_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found> found_;
  std::set<std::string> used_;
  std::vector<std::unique_ptr<IntGroupsWeight>> weights_;
  std::vector<std::unique_ptr<uint8_t[]>> realigned_;
  std::vector<std::unique_ptr<OutlierCsr>> outlier_lists_;
};

void QuantizedCheckpoint::open(const fs::path& model_dir) {
  const fs::path single = model_dir / "model.safetensors", index = model_dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const json j = read_json(index);
    if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
      throw Error(ErrorCode::bad_checkpoint, index.string() + ": missing the 'weight_map' object");
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [name, shard_json] : j.at("weight_map").items()) {
      const std::string shard = shard_json.is_string() ? shard_json.get<std::string>() : "";
      if (shard.empty() || shard.find('/') != std::string::npos || !fs::exists(model_dir / shard))
        throw Error(ErrorCode::bad_checkpoint, index.string() + ": tensor '" + name + "': shard '" + shard +
                                                   "' is not a file of the model directory");
      if (!shards.count(shard)) {
        files_.push_back(std::make_unique<SafetensorsFile>(model_dir / shard, true));
        shards[shard] = files_.back().get();
      }
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single, true));
  } else {
    throw Error(ErrorCode::bad_checkpoint,
                model_dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& file : files_)
    for (const auto& [name, e] : file->entries()) {
      if (found_.count(name))
        throw Error(ErrorCode::bad_checkpoint, file->path().string() + ": tensor '" + name + "': stored twice");
      found_[name] = {file.get(), &e};
    }
}

QuantizedCheckpoint::QuantizedCheckpoint(const fs::path& model_dir, const QuantizedFormat& format)
    : format_(format) {
  config_ = load_model_config(model_dir);
  source_ = model_dir.string();
  open(model_dir);
  for (const auto& [name, shape] : expected_tensors(config_)) {
    const std::string prefix = name.size() > 7 ? name.substr(0, name.size() - 7) : name;  // drop ".weight"
    const bool quantized = shape.size() == 2 && name.ends_with(".weight") && found_.count(prefix + ".qweight");
    if (quantized)
      adopt_quantized(prefix, shape);
    else
      adopt_plain(name, shape);
  }
  for (const auto& [name, f] : found_) {
    if (used_.count(name) || name.ends_with(".self_attn.rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;
    // Quantizers store a bias for every projection; a model without biases must get zeros.
    if (name.ends_with(".bias") && found_.count(name.substr(0, name.size() - 5) + ".qweight")) {
      const std::vector<float> b = floats(f);
      if (std::all_of(b.begin(), b.end(), [](float v) { return v == 0.0f; })) continue;
      fail(name, "a non-zero bias, which a " + config_.architecture + " has no place for");
    }
    fail(name, "unexpected tensor (a " + config_.architecture + " with " + std::to_string(config_.num_layers) +
                   " layers quantized by " + format_.method + " has no such tensor)");
  }
  tokenizer_path_ = find_tokenizer(model_dir);
}

void QuantizedCheckpoint::adopt_outliers(const std::string& prefix, int64_t out, int64_t in) {
  const std::string names[3] = {prefix + ".outlier_row_ptr", prefix + ".outlier_cols", prefix + ".outlier_values"};
  if (!found_.count(names[0]) && !found_.count(names[1]) && !found_.count(names[2])) return;
  for (const std::string& name : names) {
    const auto it = found_.find(name);
    if (it == found_.end()) fail(name, "missing (the other outlier tensors of " + prefix + " are there)");
    const SafetensorsEntry& e = *it->second.entry;
    if (e.shape.size() != 1) fail(name, "shape " + shape_string(e.shape) + ", expected one dimension");
    const bool values = &name == &names[2];
    if (values ? (e.dtype != DType::f16 && e.dtype != DType::f32) : e.dtype != DType::i32)
      fail(name, std::string("dtype ") + dtype_name(e.dtype) + ", expected " + (values ? "F16 or F32" : "I32"));
    used_.insert(name);
  }
  auto csr = std::make_unique<OutlierCsr>();
  csr->in_features = in;
  auto words = [&](const Found& f) {
    std::vector<uint32_t> v((f.entry->end - f.entry->begin) / 4);
    std::memcpy(v.data(), f.file->data(*f.entry), v.size() * 4);
    return v;
  };
  csr->row_ptr = words(found_.at(names[0]));
  csr->cols = words(found_.at(names[1]));
  csr->values = floats(found_.at(names[2]));
  std::string which;
  const std::string problem = csr->problem(out, which);
  if (!problem.empty())
    fail(prefix + ".outlier_" + which,
         problem + " (the outliers of a [" + std::to_string(out) + ", " + std::to_string(in) + "] projection)");
  const void* data[3] = {csr->row_ptr.data(), csr->cols.data(), csr->values.data()};
  for (int i = 0; i < 3; ++i) {
    TensorView view;
    view.name = names[i];
    view.dtype = i == 2 ? DType::f32 : DType::i32;
    view.shape = {i == 0 ? out + 1 : static_cast<int64_t>(csr->size())};
    view.data = data[i];
    tensors_.emplace(view.name, std::move(view));
  }
  outlier_lists_.push_back(std::move(csr));
}

const Found& QuantizedCheckpoint::need(const std::string& name, DType dtype_class, const std::vector<int64_t>& shape,
                                       const std::string& why) {
  const auto it = found_.find(name);
  if (it == found_.end()) fail(name, "missing (" + why + ")");
  const DType d = it->second.entry->dtype;
  const bool ok = dtype_class == DType::i32 ? d == DType::i32 : (d == DType::f32 || d == DType::f16 || d == DType::bf16);
  if (!ok) fail(name, std::string("dtype ") + dtype_name(d) + ", expected " + (dtype_class == DType::i32 ? "I32" : "a float type"));
  if (it->second.entry->shape != shape)
    fail(name, "shape " + shape_string(it->second.entry->shape) + ", expected " + shape_string(shape) + " (" + why + ")");
  used_.insert(name);
  return it->second;
}

std::vector<float> QuantizedCheckpoint::floats(const Found& f) const {
  const int64_t n = static_cast<int64_t>((f.entry->end - f.entry->begin) / dtype_size(f.entry->dtype));
  std::vector<float> out(static_cast<size_t>(n));
  std::vector<uint8_t> bytes(f.entry->end - f.entry->begin);  // the file's alignment is not guaranteed
  std::memcpy(bytes.data(), f.file->data(*f.entry), bytes.size());
  convert_to_f32(f.entry->dtype, bytes.data(), out.data(), out.size());
  return out;
}

std::vector<int32_t> QuantizedCheckpoint::ints(const Found& f) const {
  std::vector<int32_t> out((f.entry->end - f.entry->begin) / 4);
  std::memcpy(out.data(), f.file->data(*f.entry), out.size() * 4);
  return out;
}

void QuantizedCheckpoint::adopt_plain(const std::string& name, const std::vector<int64_t>& shape) {
  const Found& f = need(name, DType::f32, shape, "a " + config_.architecture + " weight");
  TensorView view;
  view.name = name;
  view.dtype = f.entry->dtype;
  view.shape = shape;
  view.data = f.file->data(*f.entry);
  if (reinterpret_cast<uintptr_t>(view.data) % dtype_size(view.dtype) != 0) {
    realigned_.push_back(std::make_unique<uint8_t[]>(view.nbytes()));
    std::memcpy(realigned_.back().get(), view.data, view.nbytes());
    view.data = realigned_.back().get();
  }
  tensors_.emplace(name, std::move(view));
}

void QuantizedCheckpoint::adopt_quantized(const std::string& prefix, const std::vector<int64_t>& shape) {
  const int64_t out = shape[0], in = shape[1];
  const int bits = format_.bits, pack = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t group = format_.group_size == -1 ? in : format_.group_size;
  const std::string qweight = prefix + ".qweight";
  if (in % group != 0)
    fail(qweight, "group_size " + std::to_string(group) + " does not divide in_features " + std::to_string(in));
  const int64_t groups = in / group;
  const bool awq = format_.method == "awq";
  if (out % pack != 0 || (!awq && in % pack != 0))
    fail(qweight, "the weight [" + std::to_string(out) + ", " + std::to_string(in) + "] does not pack " +
                      std::to_string(pack) + " values per int32");
  const std::vector<int32_t> qw = ints(need(qweight, DType::i32, awq ? std::vector<int64_t>{in, out / pack}
                                                                        : std::vector<int64_t>{in / pack, out},
                                            "the packed weight of a [" + std::to_string(out) + ", " +
                                                std::to_string(in) + "] projection"));
  const std::vector<int32_t> qz =
      ints(need(prefix + ".qzeros", DType::i32, {groups, out / pack}, "the zero points of " + qweight));
  const std::vector<float> sc = floats(need(prefix + ".scales", DType::f32, {groups, out}, "the scales of " + qweight));

  // The group of each input column, checked.
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t k = 0; k < in; ++k) g_idx[k] = static_cast<int32_t>(k / group);
  const std::string g_name = prefix + ".g_idx";
  if (!awq && found_.count(g_name)) {
    g_idx = ints(need(g_name, DType::i32, {in}, "the group of each input of " + qweight));
    for (int64_t k = 0; k < in; ++k)
      if (g_idx[k] < 0 || g_idx[k] >= groups)
        fail(g_name, "g_idx[" + std::to_string(k) + "] = " + std::to_string(g_idx[k]) + " is outside 0.." +
                         std::to_string(groups - 1));
  }
  std::vector<uint32_t> order(static_cast<size_t>(in));
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return g_idx[a] < g_idx[b]; });
  bool permuted = false;
  for (int64_t j = 0; j < in; ++j) {
    if (g_idx[order[j]] != j / group)
      fail(g_name, "group " + std::to_string(j / group) + " does not hold " + std::to_string(group) +
                       " input columns (each group of an act-order g_idx must)");
    permuted = permuted || order[j] != static_cast<uint32_t>(j);
  }

  static constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // output j of a word sits in nibble kAwqNibble[j]
  auto packed = [&](const std::vector<int32_t>& words, int64_t row, int64_t cols, int64_t n) {
    const auto word = static_cast<uint32_t>(words[static_cast<size_t>(row * cols + n / pack)]);
    const int slot = awq ? kAwqNibble[n % pack] : static_cast<int>(n % pack);
    return (word >> (bits * slot)) & mask;
  };
  auto w = std::make_unique<IntGroupsWeight>(bits, static_cast<uint32_t>(group), static_cast<uint32_t>(out),
                                             static_cast<uint32_t>(in));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t n = 0; n < out; ++n) {
      uint32_t zero = packed(qz, g, out / pack, n);
      if (!awq && !format_.v2) zero += 1;  // GPTQ v1 stores zero - 1
      if (zero > mask)
        fail(prefix + ".qzeros", "zero point " + std::to_string(zero) + " (stored " + std::to_string(zero - 1) +
                                     ", checkpoint_format gptq adds one) of group " + std::to_string(g) +
                                     ", output " + std::to_string(n) + " is outside 0.." + std::to_string(mask));
      w->zeros[static_cast<size_t>(n * groups + g)] = static_cast<uint8_t>(zero);
      w->scales[static_cast<size_t>(n * groups + g)] = sc[static_cast<size_t>(g * out + n)];
    }
  for (int64_t j = 0; j < in; ++j) {
    const int64_t k = order[j];
    for (int64_t n = 0; n < out; ++n) {
      const uint32_t q = awq ? packed(qw, k, out / pack, n)
                             : (static_cast<uint32_t>(qw[static_cast<size_t>((k / pack) * out + n)]) >>
                                (bits * (k % pack))) & mask;
      w->set_q(n, j, q);
    }
  }
  if (permuted) w->input_order = order;
  TensorView view;
  view.name = prefix + ".weight";
  view.dtype = bits == 4 ? DType::int4_groups : DType::int8_groups;
  view.shape = shape;
  view.data = w->header();
  weights_.push_back(std::move(w));
  tensors_.emplace(view.name, std::move(view));
  adopt_outliers(prefix, out, in);
}

}  // namespace

std::optional<QuantizedFormat> read_quantized_format(const fs::path& model_dir) {
  const fs::path config = model_dir / "config.json", gptq = model_dir / "quantize_config.json";
  if (fs::is_regular_file(config)) {
    const json j = read_json(config);
    if (j.is_object() && j.contains("quantization_config")) return parse_format(j.at("quantization_config"), config);
  }
  if (fs::is_regular_file(gptq)) return parse_format(read_json(gptq), gptq);
  return std::nullopt;
}

std::unique_ptr<Checkpoint> load_quantized_checkpoint(const fs::path& model_dir, const QuantizedFormat& format) {
  return std::make_unique<QuantizedCheckpoint>(model_dir, format);
}

}  // namespace llmk
