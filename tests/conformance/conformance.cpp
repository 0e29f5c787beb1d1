#include "conformance.hpp"

#include <cstdlib>
#include <sstream>

namespace llmk::conformance {

std::vector<std::filesystem::path> conformance_dirs(std::vector<std::filesystem::path> extra_dirs) {
  if (const char* env = std::getenv("LLMK_CONFORMANCE_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty()) extra_dirs.emplace_back(dir);
  }
  return extra_dirs;
}

std::vector<std::string> discover_plugins(PluginRegistry& registry, llmk_plugin_kind kind) {
  std::vector<std::string> names;
  for (const auto& found : registry.discover())
    if (found.error.empty() && found.info.kind == kind && plugin_serves_device(found.info, "cpu")) names.push_back(found.info.name);
  return names;
}


}  // namespace llmk::conformance
