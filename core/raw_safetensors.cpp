#include "core/raw_safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstring>

#include "core/error.hpp"

namespace llmk {
namespace {

[[noreturn]] void fail_tensor(const std::filesystem::path& file, const std::string& name, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": tensor '" + name + "': " + what);
}

}  // namespace

size_t raw_dtype_size(const std::string& d) {
  if (d == "U8" || d == "I8" || d == "BOOL") return 1;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  return 0;
}

std::map<std::string, RawEntry> read_raw_entries(const MappedFile& f) {
  const std::filesystem::path& file = f.path();
  uint64_t n = 0;
  if (f.size() < 8) throw Error(ErrorCode::bad_checkpoint, file.string() + ": shorter than a safetensors header");
  std::memcpy(&n, f.data(), 8);
  if (n > SafetensorsFile::kMaxHeaderBytes || 8 + n > f.size())
    throw Error(ErrorCode::bad_checkpoint, file.string() + ": header length " + std::to_string(n) + " is not in the file");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(f.data() + 8, f.data() + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::bad_checkpoint, file.string() + ": header is not valid JSON: " + e.what());
  }
  const uint8_t* start = f.data() + 8 + n;
  const uint64_t data_size = f.size() - 8 - n;
  std::map<std::string, RawEntry> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    RawEntry e;
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      fail_tensor(file, name, "entry needs dtype, shape and data_offsets");
    e.dtype = v["dtype"].get<std::string>();
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail_tensor(file, name, "shape " + v["shape"].dump() + " is not a list of sizes");
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(), end = v["data_offsets"][1].get<uint64_t>();
    if (raw_dtype_size(e.dtype) == 0) fail_tensor(file, name, "dtype " + e.dtype + " is not a safetensors dtype");
    if (b > end || end > data_size || end - b != numel * raw_dtype_size(e.dtype))
      fail_tensor(file, name, "data_offsets " + v["data_offsets"].dump() + " do not hold shape " + v["shape"].dump() +
                                  " of " + e.dtype);
    e.data = start + b;
    e.bytes = end - b;
    out.emplace(name, std::move(e));
  }
  return out;
}

}  // namespace llmk
