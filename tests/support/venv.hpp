// The project venv's Python (scripts/setup.sh makes .venv with the
// reference implementations tests compare against: tokenizers, jinja2, gguf,
// numpy). Tests that need it skip when it is absent.
#pragma once

#include <filesystem>
#include <string>

namespace llmk::test {

inline std::string venv_python() { return std::string(LLMK_SOURCE_DIR) + "/.venv/bin/python"; }

// A dangling or looping .venv link counts as absent.
inline bool have_venv_python() {
  std::error_code ec;
  return std::filesystem::is_regular_file(venv_python(), ec);
}

}  // namespace llmk::test
