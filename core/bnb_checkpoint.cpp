#include "core/bnb_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/model_config.hpp"
#include "core/raw_safetensors.hpp"
#include "core/safetensors.hpp"

namespace llmk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStateSuffixes[] = {".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4"};

[[noreturn]] void fail_tensor(const fs::path& file, const std::string& name, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": tensor '" + name + "': " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(ErrorCode::not_found, file.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// a * b, then + c, each rounded to f32 (never fused: the reference rounds twice).
float mul_add_unfused(float a, float b, float c) {
  float p = a * b;
  asm volatile("" : "+x"(p));
  return p + c;
}

float mul_unfused(float a, float b) {
  float p = a * b;
  asm volatile("" : "+x"(p));
  return p;
}

std::vector<float> f32_values(const fs::path& file, const std::map<std::string, RawEntry>& entries,
                              const std::string& name, const std::string& of, int64_t count) {
  auto it = entries.find(name);
  if (it == entries.end()) fail_tensor(file, of, "missing '" + name + "'");
  if (it->second.dtype != "F32") fail_tensor(file, name, "dtype " + it->second.dtype + ", expected F32");
  if (count >= 0 && static_cast<int64_t>(it->second.bytes / 4) != count)
    fail_tensor(file, name, std::to_string(it->second.bytes / 4) + " values, expected " + std::to_string(count));
  std::vector<float> v(it->second.bytes / 4);
  std::memcpy(v.data(), it->second.data, it->second.bytes);
  return v;
}

class BnbCheckpoint final : public Checkpoint {
 public:
  explicit BnbCheckpoint(const fs::path& dir) {
    source_ = dir.string();
    const fs::path config_file = dir / "config.json";
    json cfg = json::parse(read_text(config_file), nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object())
      throw Error(ErrorCode::bad_checkpoint, config_file.string() + ": not a JSON object");
    if (cfg.contains("quantization_config")) {
      const auto& q = cfg["quantization_config"];
      if (!q.is_object() || q.value("quant_method", "") != "bitsandbytes")
        throw Error(ErrorCode::unsupported, config_file.string() + ": quantization_config.quant_method " +
                                                (q.is_object() ? q.value("quant_method", "(none)") : "(none)") +
                                                " is not bitsandbytes");
      cfg.erase("quantization_config");
    }
    config_ = parse_model_config_json(cfg.dump(), config_file.string());
    apply_folder_configs(config_, dir);  // generation_config.json's ids, tokenizer_config.json's add_bos_token
    if (fs::exists(dir / "model.safetensors.index.json"))
      throw Error(ErrorCode::unsupported, (dir / "model.safetensors.index.json").string() +
                                              ": sharded bitsandbytes checkpoints are not supported");
    file_ = std::make_unique<MappedFile>(dir / "model.safetensors");
    const auto entries = read_raw_entries(*file_);
    const auto expected = expected_tensors(config_);
    const fs::path& file = file_->path();
    for (const auto& [name, want] : expected) {
      auto it = entries.find(name);
      if (it == entries.end()) fail_tensor(file, name, "missing");
      std::string state;
      for (const char* s : kStateSuffixes)
        if (entries.count(name + s)) state = name + s;
      if (!state.empty()) {
        adopt(name, dequantize(file, entries, name, state, want), want);
        continue;
      }
      const RawEntry& e = it->second;
      DType dtype;
      if (!parse_safetensors_dtype(e.dtype, dtype))
        fail_tensor(file, name, "dtype " + e.dtype + " without a bitsandbytes quant_state (F32, F16, BF16 or 4-bit)");
      if (e.shape != want) fail_tensor(file, name, "shape does not match the config");
      std::vector<float> v(e.bytes / dtype_size(dtype));
      convert_to_f32(dtype, e.data, v.data(), v.size());
      adopt(name, std::move(v), want);
    }
    for (const auto& [name, e] : entries) {
      bool known = expected.count(name) != 0 || (name == "lm_head.weight" && config_.tie_word_embeddings);
      for (const char* part : {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", kStateSuffixes[0],
                               kStateSuffixes[1]})
        known = known || ends_with(name, part);
      if (!known) fail_tensor(file, name, "unexpected tensor");
    }
    tokenizer_path_ = find_tokenizer(dir);
  }

 private:
  std::vector<float> dequantize(const fs::path& file, const std::map<std::string, RawEntry>& entries,
                                const std::string& name, const std::string& state_name,
                                const std::vector<int64_t>& want) {
    const RawEntry& st = entries.at(state_name);
    const json state = json::parse(st.data, st.data + st.bytes, nullptr, false);
    if (state.is_discarded() || !state.is_object()) fail_tensor(file, state_name, "not a JSON object");
    const int64_t block = state.value("blocksize", int64_t{0});
    if (block <= 0) fail_tensor(file, state_name, "blocksize missing or not positive");
    if (!state.contains("shape") || state["shape"].get<std::vector<int64_t>>() != want)
      fail_tensor(file, name, "quant_state shape " + (state.contains("shape") ? state["shape"].dump() : "(none)") +
                                  " does not match the config's");
    const int64_t n = want[0] * want[1], num_blocks = (n + block - 1) / block;
    const RawEntry& packed = entries.at(name);
    if (packed.dtype != "U8" || static_cast<int64_t>(packed.bytes) != (n + 1) / 2)
      fail_tensor(file, name, std::to_string(packed.bytes) + " bytes of " + packed.dtype + ", expected " +
                                  std::to_string((n + 1) / 2) + " U8 (two 4-bit codes a byte)");
    const std::vector<float> quant_map = f32_values(file, entries, name + ".quant_map", name, 16);
    std::vector<float> absmax(static_cast<size_t>(num_blocks));
    auto a = entries.find(name + ".absmax");
    if (a == entries.end()) fail_tensor(file, name, "missing '" + name + ".absmax'");
    if (state.contains("nested_blocksize")) {  // double quantization: U8 codes of the scales
      const int64_t nb = state.value("nested_blocksize", int64_t{0});
      if (nb <= 0) fail_tensor(file, state_name, "nested_blocksize is not positive");
      const float offset = state.value("nested_offset", 0.0f);
      const auto nested = f32_values(file, entries, name + ".nested_absmax", name, (num_blocks + nb - 1) / nb);
      const auto nested_map = f32_values(file, entries, name + ".nested_quant_map", name, 256);
      if (a->second.dtype != "U8" || static_cast<int64_t>(a->second.bytes) != num_blocks)
        fail_tensor(file, a->first, "expected " + std::to_string(num_blocks) + " U8 codes (double quantization)");
      for (int64_t b = 0; b < num_blocks; ++b)
        absmax[b] = mul_add_unfused(nested_map[a->second.data[b]], nested[b / nb], offset);
    } else {
      absmax = f32_values(file, entries, name + ".absmax", name, num_blocks);
    }
    std::vector<float> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t byte = packed.data[i / 2];
      const int code = i % 2 == 0 ? byte >> 4 : byte & 15;
      w[i] = mul_unfused(quant_map[code], absmax[i / block]);
    }
    return w;
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

  std::unique_ptr<MappedFile> file_;
  std::vector<std::vector<float>> owned_;  // every tensor as f32
};

}  // namespace

bool is_bnb_4bit_checkpoint(const fs::path& model_dir) {
  const fs::path single = model_dir / "model.safetensors", index = model_dir / "model.safetensors.index.json";
  std::string names;
  if (fs::is_regular_file(index)) {
    names = read_text(index);
  } else if (fs::is_regular_file(single)) {
    std::ifstream in(single, std::ios::binary);
    uint64_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), 8) || n > SafetensorsFile::kMaxHeaderBytes) return false;
    names.resize(n);
    if (!in.read(names.data(), static_cast<std::streamsize>(n))) return false;
  }
  for (const char* s : kStateSuffixes)
    if (names.find(s) != std::string::npos) return true;
  return false;
}

std::unique_ptr<Checkpoint> load_bnb_checkpoint(const fs::path& model_dir) {
  return std::make_unique<BnbCheckpoint>(model_dir);
}

}  // namespace llmk
