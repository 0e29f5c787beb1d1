#include "core/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace llmk {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": " + what);
}

[[noreturn]] void fail_tensor(const std::filesystem::path& file, const std::string& name, const std::string& what) {
  throw Error(ErrorCode::bad_checkpoint, file.string() + ": tensor '" + name + "': " + what);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsEntry parse_entry(const std::filesystem::path& file, const std::string& name, const json& v,
                             uint64_t data_size, bool integers) {
  if (!v.is_object()) fail_tensor(file, name, "entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail_tensor(file, name, std::string("missing '") + key + "'");

  SafetensorsEntry e;
  const json& dtype = v.at("dtype");
  if (!dtype.is_string()) fail_tensor(file, name, "dtype is not a string");
  const std::string d = dtype.get<std::string>();
  const bool integer = integers && (d == "I32" || d == "I8" || d == "U8");
  if (integer) e.dtype = d == "I32" ? DType::i32 : d == "I8" ? DType::i8 : DType::u8;
  if (!integer && !parse_safetensors_dtype(d, e.dtype))
    fail_tensor(file, name,
                "dtype " + dtype.dump() + " is not supported (F32, F16, BF16" + (integers ? ", I32, I8, U8)" : ")"));

  const json& shape = v.at("shape");
  if (!shape.is_array()) fail_tensor(file, name, "shape is not a list");
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      fail_tensor(file, name, "shape " + shape.dump() + " has a dimension that is not a non-negative integer");
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > (uint64_t(1) << 60) / dim) fail_tensor(file, name, "shape " + shape.dump() + " is too large");
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  const json& offsets = v.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail_tensor(file, name, "data_offsets " + offsets.dump() + " is not a pair of non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) fail_tensor(file, name, "data_offsets " + offsets.dump() + " are reversed");
  if (e.end > data_size)
    fail_tensor(file, name,
                "data_offsets " + offsets.dump() + " run past the end of the data (" + std::to_string(data_size) +
                    " bytes)");
  const uint64_t expected = numel * dtype_size(e.dtype);
  if (e.end - e.begin != expected)
    fail_tensor(file, name,
                "data_offsets " + offsets.dump() + " span " + std::to_string(e.end - e.begin) + " bytes but shape " +
                    shape_string(e.shape) + " of " + dtype.get<std::string>() + " needs " + std::to_string(expected));
  return e;
}

}  // namespace

bool parse_safetensors_dtype(const std::string& name, DType& out) {
  if (name == "F32") out = DType::f32;
  else if (name == "F16") out = DType::f16;
  else if (name == "BF16") out = DType::bf16;
  else return false;
  return true;
}

MappedFile::MappedFile(const std::filesystem::path& file) : path_(file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(file, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(file, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(file, std::string("cannot mmap: ") + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& file, bool integers)
    : file_(std::make_shared<MappedFile>(file)) {
  const uint64_t size = file_->size();
  if (size < 8) fail(file, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_->data()[i];  // little-endian
  if (header_len > kMaxHeaderBytes)
    fail(file, "header length " + std::to_string(header_len) + " is absurd (more than " +
                   std::to_string(kMaxHeaderBytes) + " bytes)");
  if (header_len > size - 8)
    fail(file, "header length " + std::to_string(header_len) + " is larger than the file (" + std::to_string(size) +
                   " bytes)");

  const char* header_begin = reinterpret_cast<const char*>(file_->data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(file, "header is not a JSON object");

  data_start_ = file_->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(file, "__metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items())
        metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    entries_.emplace(name, parse_entry(file, name, value, data_size, integers));
  }

  // No two non-empty tensors may share bytes: sort by start, compare neighbours.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : entries_)
    if (e.end > e.begin) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i].second->begin < order[i - 1].second->end)
      fail_tensor(file, *order[i].first,
                  "data_offsets [" + std::to_string(order[i].second->begin) + ", " +
                      std::to_string(order[i].second->end) + "] overlap tensor '" + *order[i - 1].first + "'");
  }
}

}  // namespace llmk
