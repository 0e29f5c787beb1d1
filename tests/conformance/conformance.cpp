#include "conformance.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "support/skip.hpp"

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
    if (found.usable() && found.info.kind == kind && plugin_serves_device(found.info, "cpu") &&
        std::find(names.begin(), names.end(), found.info.name) == names.end())
      names.push_back(found.info.name);
  return names;
}

std::vector<PluginFile> discover_plugin_files(PluginRegistry& registry, llmk_plugin_kind kind, const std::string& isa) {
  std::vector<PluginFile> files;
  for (const auto& found : registry.discover()) {
    if (!found.usable() || found.info.kind != kind || found.info.isa != isa) continue;
    if (!plugin_serves_device(found.info, "cpu")) continue;
    const bool seen = std::any_of(files.begin(), files.end(), [&](const PluginFile& f) { return f.name == found.info.name; });
    if (!seen) files.push_back({found.info.name, isa});
  }
  return files;
}

std::string cpu_level_unavailable(const std::string& isa) {
  const auto built = cpu_isa_levels_built();
  if (isa != "baseline" && std::find(built.begin(), built.end(), isa) == built.end())
    return "this build makes no CPU plugins for level " + isa + " (LLMK_CPU_DISPATCH=OFF or not x86-64)";
  const std::string missing = cpu_isa_missing_text(cpu_isa_level(isa));
  return missing.empty() ? "" : "this CPU lacks " + missing + " (CPU level " + isa + ")";
}

void check_plugins_at(llmk_plugin_kind kind, const std::string& isa, SuiteResult (*suite)(const Plugin&)) {
  if (const std::string why = cpu_level_unavailable(isa); !why.empty()) LLMK_SKIP(why);
  PluginRegistry registry(conformance_dirs());
  const auto files = discover_plugin_files(registry, kind, isa);
  REQUIRE_FALSE(files.empty());  // attention.cpu and linear.dense are built at every level
  for (const auto& file : files) {
    const SuiteResult r = suite(registry.load(file.name, kind, file.isa));
    INFO(file.name << " (" << isa << "): " << r.num_passed << " passed, " << r.num_unsupported << " unsupported");
    for (const auto& f : r.failures) FAIL_CHECK(file.name << " (" << isa << "): " << f);
    CHECK(r.num_passed > 0);
  }
}

}  // namespace llmk::conformance
