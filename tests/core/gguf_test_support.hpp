// Test helpers for GGUF: running tests/gguf_write_models.py (PyPI's gguf,
// llama.cpp's writer) from the project venv, and building small GGUF byte
// strings by hand for the malformed-file tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "support/venv.hpp"

namespace llmk::test {

inline bool have_gguf_python() {
  std::error_code ec;  // a dangling or looping .venv link counts as absent
  if (!std::filesystem::is_regular_file(venv_python(), ec)) return false;
  return std::system((venv_python() + " -c 'import gguf, numpy' >/dev/null 2>&1").c_str()) == 0;
}
// Runs the writer script with `args`; true on success.
inline bool run_gguf_writer(const std::string& args) {
  const std::string cmd =
      venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/tests/gguf_write_models.py " + args + " >/dev/null";
  return std::system(cmd.c_str()) == 0;
}

// Little-endian GGUF bytes, written field by field.
struct GgufBytes {
  std::string bytes;
  GgufBytes& u8(uint8_t v) { return raw(&v, 1); }
  GgufBytes& u32(uint32_t v) { return raw(&v, 4); }
  GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
  GgufBytes& f32(float v) { return raw(&v, 4); }
  GgufBytes& str(const std::string& s) {
    u64(s.size());
    bytes += s;
    return *this;
  }
  GgufBytes& raw(const void* p, size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return *this;
  }
  GgufBytes& pad_to(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back('\0');
    return *this;
  }
  // Key + u32 type 4 + value.
  GgufBytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  // Tensor info: name, dims (innermost first), type, offset.
  GgufBytes& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
};

}  // namespace llmk::test
