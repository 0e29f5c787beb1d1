// Runs tests/core/chat_template_reference.py (PyPI's jinja2 in the
// environment transformers renders chat templates with) over a batch of
// cases and returns one result per case.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "support/venv.hpp"

namespace llmk::test {

inline bool have_venv() { return std::filesystem::exists(venv_python()); }

// cases: [{"template": PATH | "source": TEXT, "variables": {...}}]. Returns
// [{"text"} | {"raised"} | {"error"}] in order; empty json on failure to run.
inline nlohmann::ordered_json jinja_reference(const nlohmann::ordered_json& cases) {
  const auto dir = std::filesystem::temp_directory_path() / ("llmk_jinja_ref_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "cases.json";
  const auto out = dir / "out.json";
  std::ofstream(in) << cases.dump();
  const std::string cmd = venv_python() + " " + LLMK_SOURCE_DIR + "/tests/core/chat_template_reference.py " +
                          in.string() + " " + out.string();
  nlohmann::ordered_json result;
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream f(out);
    result = nlohmann::ordered_json::parse(f);
  }
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace llmk::test
