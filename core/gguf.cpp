#include "core/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "core/safetensors.hpp"  // MappedFile

namespace llmk {
namespace {

// Bounds-checked little-endian reads over the file; every failure names the
// offset it happened at and what was being read.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::bad_checkpoint, name_ + ": " + what);
  }
  [[noreturn]] void fail_at(uint64_t offset, const std::string& what) const {
    fail(what + " (at offset " + std::to_string(offset) + ")");
  }

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail_at(pos_, "file truncated: " + what + " needs " + std::to_string(n) + " bytes but only " +
                        std::to_string(remaining()) + " remain");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what + " length");
    if (len > remaining())
      fail_at(at, what + " has length " + std::to_string(len) + ", past the end of the file (" +
                      std::to_string(remaining()) + " bytes remain)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::f64); }

// The fewest bytes one element of type t can occupy: bounds array counts
// before anything is allocated.
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean: return 1;
    case GgufValueType::u16:
    case GgufValueType::i16: return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32: return 4;
    case GgufValueType::string:
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64: return 8;
    case GgufValueType::array: return 12;
  }
  return 1;
}

GgufValue read_value(Reader& r, GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  const std::string what = "metadata key '" + key + "'";
  switch (type) {
    case GgufValueType::u8: v.integer = r.read<uint8_t>(what); break;
    case GgufValueType::i8: v.integer = r.read<int8_t>(what); break;
    case GgufValueType::u16: v.integer = r.read<uint16_t>(what); break;
    case GgufValueType::i16: v.integer = r.read<int16_t>(what); break;
    case GgufValueType::u32: v.integer = r.read<uint32_t>(what); break;
    case GgufValueType::i32: v.integer = r.read<int32_t>(what); break;
    case GgufValueType::u64: {
      const uint64_t u = r.read<uint64_t>(what);
      v.is_huge_u64 = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v.integer = v.is_huge_u64 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(u);
      break;
    }
    case GgufValueType::i64: v.integer = r.read<int64_t>(what); break;
    case GgufValueType::f32: v.real = r.read<float>(what); break;
    case GgufValueType::f64: v.real = r.read<double>(what); break;
    case GgufValueType::boolean: {
      const uint64_t at = r.pos();
      const uint8_t b = r.read<uint8_t>(what);
      if (b > 1) r.fail_at(at, what + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.integer = b;
      break;
    }
    case GgufValueType::string: v.string = r.read_string(what); break;
    case GgufValueType::array: {
      const uint64_t at = r.pos();
      if (depth >= GgufFile::kMaxArrayDepth)
        r.fail_at(at, what + ": arrays nest deeper than " + std::to_string(GgufFile::kMaxArrayDepth) + " levels");
      const uint32_t element = r.read<uint32_t>(what + " array element type");
      if (!valid_value_type(element))
        r.fail_at(at, what + ": array element type " + std::to_string(element) + " is not a GGUF value type (0..12)");
      v.element_type = static_cast<GgufValueType>(element);
      const uint64_t count = r.read<uint64_t>(what + " array length");
      if (count > r.remaining() / min_value_bytes(v.element_type))
        r.fail_at(at, what + ": array of " + std::to_string(count) + " " + gguf_value_type_name(v.element_type) +
                          " values cannot fit in the " + std::to_string(r.remaining()) +
                          " bytes left in the file (corrupt count or truncated file)");
      v.elements.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) v.elements.push_back(read_value(r, v.element_type, key, depth + 1));
      break;
    }
  }
  return v;
}

std::string dims_string(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) noexcept {
  switch (t) {
    case GgufValueType::u8: return "u8";
    case GgufValueType::i8: return "i8";
    case GgufValueType::u16: return "u16";
    case GgufValueType::i16: return "i16";
    case GgufValueType::u32: return "u32";
    case GgufValueType::i32: return "i32";
    case GgufValueType::f32: return "f32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "u64";
    case GgufValueType::i64: return "i64";
    case GgufValueType::f64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const noexcept {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::u16:
    case GgufValueType::i16:
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::u64:
    case GgufValueType::i64: return true;
    default: return false;
  }
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

uint64_t GgufTensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::filesystem::path& file)
    : name_(file.string()), mapping_(std::make_unique<MappedFile>(file)) {
  data_ = mapping_->data();
  size_ = mapping_->size();
  parse();
}

GgufFile::GgufFile(const uint8_t* data, size_t size, std::string name)
    : name_(std::move(name)), data_(data), size_(size) {
  parse();
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::parse() {
  Reader r(data_, size_, name_);
  if (size_ < 4) r.fail("file is " + std::to_string(size_) + " bytes, too short for the GGUF magic");
  const uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic) {
    char text[5] = {};
    std::memcpy(text, data_, 4);
    for (char& c : text)
      if (c && (c < 32 || c > 126)) c = '?';
    r.fail_at(0, std::string("bad magic '") + text + "' (a GGUF file starts with 'GGUF')");
  }
  version_ = r.read<uint32_t>("version");
  if (version_ == 1)
    r.fail_at(4, "GGUF version 1 (32-bit counts) is not supported (versions 2 and 3 are)");
  if (version_ != 2 && version_ != 3) {
    const bool swapped = (version_ & 0xFFFF) == 0 && version_ != 0;
    r.fail_at(4, "unsupported GGUF version " + std::to_string(version_) + " (versions 2 and 3 are)" +
                     (swapped ? "; this looks like a big-endian file, which is not supported" : ""));
  }
  const uint64_t num_tensors = r.read<uint64_t>("tensor count");
  const uint64_t num_kv = r.read<uint64_t>("metadata count");
  // Each key/value takes at least 13 bytes (key length, type, one byte of
  // value), each tensor info at least 24: absurd counts fail before any allocation.
  if (num_kv > r.remaining() / 13)
    r.fail_at(16, "metadata count " + std::to_string(num_kv) + " cannot fit in the " + std::to_string(r.remaining()) +
                      " bytes left in the file (corrupt count or truncated file)");
  if (num_tensors > r.remaining() / 24)
    r.fail_at(8, "tensor count " + std::to_string(num_tensors) + " cannot fit in the " +
                     std::to_string(r.remaining()) + " bytes left in the file (corrupt count or truncated file)");

  for (uint64_t i = 0; i < num_kv; ++i) {
    const uint64_t at = r.pos();
    const std::string key = r.read_string("metadata key " + std::to_string(i));
    const uint64_t type_at = r.pos();
    const uint32_t type = r.read<uint32_t>("metadata key '" + key + "' value type");
    if (!valid_value_type(type))
      r.fail_at(type_at, "metadata key '" + key + "': value type " + std::to_string(type) +
                             " is not a GGUF value type (0..12)");
    GgufValue value = read_value(r, static_cast<GgufValueType>(type), key, 0);
    if (!metadata_.emplace(key, std::move(value)).second) r.fail_at(at, "metadata key '" + key + "' appears twice");
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::u32)
      r.fail("metadata key 'general.alignment' is a " + std::string(gguf_value_type_name(a->type)) +
             ", not a u32");
    if (a->integer == 0 || (a->integer & (a->integer - 1)) != 0)
      r.fail("metadata key 'general.alignment' = " + std::to_string(a->integer) + " is not a power of two");
    alignment_ = static_cast<uint32_t>(a->integer);
  }

  tensors_.reserve(static_cast<size_t>(num_tensors));
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo t;
    t.info_offset = r.pos();
    t.name = r.read_string("tensor " + std::to_string(i) + " name");
    const std::string what = "tensor '" + t.name + "'";
    const uint64_t dims_at = r.pos();
    const uint32_t num_dims = r.read<uint32_t>(what + " dimension count");
    if (num_dims == 0 || num_dims > kMaxDims)
      r.fail_at(dims_at, what + ": " + std::to_string(num_dims) + " dimensions (must be 1 to " +
                             std::to_string(kMaxDims) + ")");
    for (uint32_t d = 0; d < num_dims; ++d) t.dims.push_back(r.read<uint64_t>(what + " dimensions"));
    const uint64_t type_at = r.pos();
    const uint32_t type = r.read<uint32_t>(what + " type");
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (info == nullptr)
      r.fail_at(type_at, what + ": unknown tensor type " + std::to_string(type) + " (no ggml type has this id)");
    t.type = static_cast<GgmlType>(type);
    const uint64_t offset_at = r.pos();
    t.offset = r.read<uint64_t>(what + " data offset");

    // Size: rows of whole blocks, no overflow (at most 2^60 bytes).
    for (uint64_t d : t.dims)
      if (d > (uint64_t(1) << 60)) r.fail_at(dims_at, what + ": dims " + dims_string(t.dims) + " are too large");
    if (t.dims[0] % info->block_size != 0)
      r.fail_at(dims_at, what + ": dims " + dims_string(t.dims) + ": the row length " + std::to_string(t.dims[0]) +
                             " is not a multiple of " + info->name + "'s block of " +
                             std::to_string(info->block_size));
    uint64_t nbytes = t.dims[0] / info->block_size * info->type_size;
    for (uint32_t d = 1; d < num_dims && nbytes != 0; ++d) {
      if (t.dims[d] != 0 && nbytes > (uint64_t(1) << 60) / t.dims[d])
        r.fail_at(dims_at, what + ": dims " + dims_string(t.dims) + " are too large");
      nbytes *= t.dims[d];
    }
    t.nbytes = nbytes;
    if (t.offset % alignment_ != 0)
      r.fail_at(offset_at, what + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                               std::to_string(alignment_));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      r.fail_at(t.info_offset, what + " appears twice");
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      r.fail("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.nbytes) +
             ") runs past the end of the data section (" + std::to_string(data_size) + " bytes from offset " +
             std::to_string(data_offset_) + ")");
  }
  // No two non-empty tensors may share bytes: sort by start, compare neighbours.
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : tensors_)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
      r.fail("tensor '" + order[i]->name + "': data at offset " + std::to_string(order[i]->offset) +
             " overlaps tensor '" + order[i - 1]->name + "' ([" + std::to_string(order[i - 1]->offset) + ", " +
             std::to_string(order[i - 1]->offset + order[i - 1]->nbytes) + "))");
}

bool is_gguf_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return false;
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace llmk
