#include "core/medusa_heads.hpp"

#include <cblas.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"

namespace llmk {

namespace fs = std::filesystem;

MedusaHeads::MedusaHeads(int32_t num_heads, int32_t num_layers, int32_t hidden_size, int32_t vocab_size)
    : num_layers_(num_layers), hidden_(hidden_size), vocab_(vocab_size) {
  const auto h = static_cast<size_t>(hidden_size);
  heads_.resize(static_cast<size_t>(num_heads));
  for (Head& head : heads_) {
    head.weight.assign(static_cast<size_t>(num_layers), std::vector<float>(h * h, 0.0f));
    head.bias.assign(static_cast<size_t>(num_layers), std::vector<float>(h, 0.0f));
    head.out.assign(static_cast<size_t>(vocab_size) * h, 0.0f);
  }
}

std::vector<float>& MedusaHeads::block_weight(int32_t head, int32_t layer) {
  return heads_.at(static_cast<size_t>(head)).weight.at(static_cast<size_t>(layer));
}
std::vector<float>& MedusaHeads::block_bias(int32_t head, int32_t layer) {
  return heads_.at(static_cast<size_t>(head)).bias.at(static_cast<size_t>(layer));
}
std::vector<float>& MedusaHeads::out_weight(int32_t head) { return heads_.at(static_cast<size_t>(head)).out; }

size_t MedusaHeads::bytes() const {
  size_t n = 0;
  for (const Head& head : heads_) {
    n += head.out.size();
    for (const auto& w : head.weight) n += w.size();
    for (const auto& b : head.bias) n += b.size();
  }
  return n * sizeof(float);
}

// y = x + SiLU(W x + b) per block (W rows are output features), then
// logits = y Out^T: one pass over each weight for all rows.
void MedusaHeads::forward(int32_t head, const float* x, int32_t rows, float* logits, std::vector<float>& scratch) const {
  const Head& hd = heads_.at(static_cast<size_t>(head));
  const int32_t h = hidden_;
  const auto n = static_cast<size_t>(rows) * static_cast<size_t>(h);
  scratch.resize(2 * n);
  float* y = scratch.data();
  float* z = scratch.data() + n;
  std::copy(x, x + n, y);
  for (int32_t l = 0; l < num_layers_; ++l) {
    const auto at = static_cast<size_t>(l);
    for (int32_t r = 0; r < rows; ++r)
      std::copy(hd.bias[at].begin(), hd.bias[at].end(), z + static_cast<size_t>(r) * static_cast<size_t>(h));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, h, h, 1.0f, y, h, hd.weight[at].data(), h, 1.0f, z, h);
    for (size_t i = 0; i < n; ++i) y[i] += z[i] / (1.0f + std::exp(-z[i]));
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, vocab_, h, 1.0f, y, h, hd.out.data(), h, 0.0f, logits,
              vocab_);
}

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

MedusaHeads MedusaHeads::load(const fs::path& path, int32_t hidden_size, int32_t vocab_size, const std::string& key) {
  auto fail = [&](const std::string& why) { throw Error(ErrorCode::invalid_config, key + ": " + why); };
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("'" + path.string() + "' does not exist");
  fs::path file = path;
  std::optional<fs::path> config_file;
  if (fs::is_directory(path, ec)) {
    file = path / "medusa_lm_head.safetensors";
    if (!fs::is_regular_file(file, ec))
      fail("directory '" + path.string() + "' holds no medusa_lm_head.safetensors");
    if (fs::is_regular_file(path / "config.json", ec)) config_file = path / "config.json";
  } else if (fs::is_regular_file(path.parent_path() / "config.json", ec) &&
             path.filename() == "medusa_lm_head.safetensors") {
    config_file = path.parent_path() / "config.json";
  }
  // The heads' own config: only its medusa_* keys are read.
  std::optional<int64_t> cfg_heads, cfg_layers;
  if (config_file) {
    std::ifstream in(*config_file);
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) fail("'" + config_file->string() + "' is not a JSON object");
    for (const char* name : {"medusa_num_heads", "medusa_num_layers"}) {
      if (!doc.contains(name)) continue;
      if (!doc[name].is_number_integer() || doc[name].get<int64_t>() < 0)
        fail("'" + config_file->string() + "': " + name + " is not a non-negative integer");
      (std::string(name) == "medusa_num_heads" ? cfg_heads : cfg_layers) = doc[name].get<int64_t>();
    }
  }
  std::unique_ptr<SafetensorsFile> st;
  try {
    st = std::make_unique<SafetensorsFile>(file);
  } catch (const Error& e) {
    fail(e.what());
  }
  const std::string where = "'" + file.string() + "'";
  // Every name is a block's weight or bias, or a head's output map.
  static const std::regex block_re(R"(^(\d+)\.(\d+)\.linear\.(weight|bias)$)");
  static const std::regex out_re(R"(^(\d+)\.(\d+)\.weight$)");
  std::map<int64_t, int64_t> out_layer;  // head -> j of its "{i}.{j}.weight"
  int64_t max_head = -1;
  for (const auto& [name, entry] : st->entries()) {
    std::smatch m;
    if (std::regex_match(name, m, block_re) || std::regex_match(name, m, out_re)) {
      if (m[1].length() > 4 || m[2].length() > 4) fail(where + ": tensor '" + name + "': index out of range");
      const int64_t i = std::stoll(m[1]), j = std::stoll(m[2]);
      max_head = std::max(max_head, i);
      if (m.size() == 3) {
        if (out_layer.count(i)) fail(where + ": tensor '" + name + "': head " + std::to_string(i) + " has two output maps");
        out_layer[i] = j;
      }
      continue;
    }
    fail(where + ": tensor '" + name + "' is not a Medusa head tensor ({i}.{j}.linear.weight, {i}.{j}.linear.bias, "
                                       "{i}.{num_layers}.weight)");
  }
  if (max_head < 0) fail(where + " holds no Medusa heads");
  const int64_t num_heads = max_head + 1;
  if (cfg_heads && *cfg_heads != num_heads)
    fail("'" + config_file->string() + "' says medusa_num_heads " + std::to_string(*cfg_heads) + " but " + where +
         " holds " + std::to_string(num_heads) + " heads");
  if (!out_layer.count(0)) fail(where + ": tensor '0." + std::to_string(cfg_layers.value_or(0)) + ".weight' is missing");
  const int64_t num_layers = cfg_layers.value_or(out_layer.at(0));
  if (num_layers > 64) fail(where + ": " + std::to_string(num_layers) + " layers per head is out of range");
  auto tensor = [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& out) {
    const auto it = st->entries().find(name);
    if (it == st->entries().end()) fail(where + ": tensor '" + name + "' is missing");
    if (it->second.shape != shape)
      fail(where + ": tensor '" + name + "' has shape " + shape_string(it->second.shape) + ", the target needs " +
           shape_string(shape) + " (hidden_size " + std::to_string(hidden_size) + ", vocab_size " +
           std::to_string(vocab_size) + ")");
    out.resize(static_cast<size_t>(it->second.end - it->second.begin) / dtype_bytes(it->second.dtype, 1));
    convert_to_f32(it->second.dtype, st->data(it->second), out.data(), out.size());
  };
  const int64_t h = hidden_size, v = vocab_size;
  MedusaHeads heads(static_cast<int32_t>(num_heads), static_cast<int32_t>(num_layers), hidden_size, vocab_size);
  size_t expected = 0;
  for (int64_t i = 0; i < num_heads; ++i) {
    const std::string p = std::to_string(i) + ".";
    const auto it = out_layer.find(i);
    if (it == out_layer.end() || it->second != num_layers)
      fail(where + ": tensor '" + p + std::to_string(num_layers) + ".weight' is missing" +
           (it == out_layer.end() ? "" : " (head " + std::to_string(i) + " ends at layer " + std::to_string(it->second) + ")"));
    for (int64_t j = 0; j < num_layers; ++j) {
      const auto hi = static_cast<int32_t>(i), lj = static_cast<int32_t>(j);
      tensor(p + std::to_string(j) + ".linear.weight", {h, h}, heads.block_weight(hi, lj));
      tensor(p + std::to_string(j) + ".linear.bias", {h}, heads.block_bias(hi, lj));
      expected += 2;
    }
    tensor(p + std::to_string(num_layers) + ".weight", {v, h}, heads.out_weight(static_cast<int32_t>(i)));
    expected += 1;
  }
  // Block indices past num_layers (or another layer count per head) name no tensor read above.
  if (st->entries().size() != expected)
    for (const auto& [name, entry] : st->entries()) {
      std::smatch m;
      if (std::regex_match(name, m, block_re) && std::stoll(m[2]) >= num_layers)
        fail(where + ": tensor '" + name + "' is past the head's " + std::to_string(num_layers) + " layers");
    }
  return heads;
}

}  // namespace llmk
