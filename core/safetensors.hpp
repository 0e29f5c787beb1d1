// One safetensors file, memory-mapped read-only and fully validated.
//
// Layout: u64 little-endian header length N, N bytes of JSON header (an
// object: tensor name -> {dtype, shape, data_offsets: [begin, end)}, plus an
// optional "__metadata__"), then the data buffer the offsets index into.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace llmk {

// A read-only private mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  // Throws Error(bad_checkpoint) naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct SafetensorsEntry {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer (after the header)
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Largest header accepted: real headers are a few hundred KB at most.
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  // Maps and validates the file: header length and JSON, every entry's
  // dtype (F32, F16, BF16), shape and offsets (ordered, inside the buffer,
  // size = numel x dtype size, no two tensors overlapping). Throws
  // Error(bad_checkpoint, "<file>: tensor '<name>': <what>"). With
  // `integers`, I32, I8 and U8 tensors too (a GPTQ/AWQ file's packed weights).
  explicit SafetensorsFile(const std::filesystem::path& file, bool integers = false);

  const std::filesystem::path& path() const { return file_->path(); }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Start of a tensor's bytes inside the mapping.
  const void* data(const SafetensorsEntry& e) const { return data_start_ + e.begin; }
  // The mapping, shared with whoever keeps tensor pointers.
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  const uint8_t* data_start_ = nullptr;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// "F32" -> f32 etc.; false for any other safetensors dtype.
bool parse_safetensors_dtype(const std::string& name, DType& out);

}  // namespace llmk
