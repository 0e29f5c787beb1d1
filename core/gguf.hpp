// One GGUF file (llama.cpp's format, versions 2 and 3), memory-mapped
// read-only and fully validated before anything uses it.
//
// Layout, little-endian:
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
//   metadata_kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset }
//   padding to `general.alignment` (u32, default 32) | tensor data
// A string is u64 length + bytes (no terminator). An array value is
// u32 element_type | u64 count | elements (arrays of arrays allowed).
// dims[0] is the innermost (contiguous) dimension; offsets are relative to
// the data section and multiples of the alignment.
//
// Every malformation throws Error(bad_checkpoint) naming the file and what
// is wrong where: a byte offset, a metadata key or a tensor name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gguf_types.hpp"

namespace llmk {

class MappedFile;

enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

const char* gguf_value_type_name(GgufValueType t) noexcept;  // "u32", "string", "array", ...

// One metadata value. Integers keep their full range in `integer` (signed
// types sign-extended, unsigned ones zero-extended: u64 values above
// INT64_MAX are flagged by is_huge_u64); f32/f64 in `real`; bool in
// `integer` (0/1).
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  int64_t integer = 0;
  bool is_huge_u64 = false;
  double real = 0;
  std::string string;
  GgufValueType element_type = GgufValueType::u8;  // arrays only
  std::vector<GgufValue> elements;                 // arrays only

  bool is_integer() const noexcept;  // u8..i64 (not bool)
  bool is_number() const noexcept { return is_integer() || type == GgufValueType::f32 || type == GgufValueType::f64; }
  double as_double() const noexcept { return is_integer() ? static_cast<double>(integer) : real; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the innermost (contiguous) dimension
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;  // bytes from the start of the data section
  uint64_t nbytes = 0;  // derived from dims and the type's block layout
  uint64_t info_offset = 0;  // where this tensor's info starts in the file (for messages)

  // Row-major shape, outermost first: dims reversed ([out, in] for a matrix).
  std::vector<int64_t> shape() const;
  uint64_t numel() const;
};

class GgufFile {
 public:
  static constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr int kMaxArrayDepth = 8;  // arrays of arrays nest at most this deep
  static constexpr uint32_t kMaxDims = 4;   // ggml tensors have at most 4 dimensions

  // Maps and validates `file`. Throws Error(bad_checkpoint) naming what is
  // wrong (see the header comment), Error(bad_checkpoint) "cannot open" when
  // the file is unreadable.
  explicit GgufFile(const std::filesystem::path& file);
  // Validates bytes already in memory (`name` names them in errors). The
  // bytes must outlive the GgufFile. Used by the fuzzer and by tests.
  GgufFile(const uint8_t* data, size_t size, std::string name);
  ~GgufFile();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Start of a tensor's bytes (valid while this GgufFile lives).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return data_ + data_offset_ + t.offset; }

 private:
  void parse();

  std::string name_;
  std::unique_ptr<MappedFile> mapping_;  // null when constructed over caller bytes
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;  // name -> index in tensors_
};

// True when `file` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& file);

}  // namespace llmk
