// llmk plugins: every plugin library on the search path, what it is and what
// it serves; libraries that fail the loader's checks are listed with the reason.
// With --conformance, the conformance suite of each plugin's kind instead
// (apps/plugins_conformance.hpp).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/command.hpp"
#include "apps/plugins_conformance.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/cpu_isa.hpp"
#include "core/plugin_api_version.hpp"
#include "core/plugin_loader.hpp"

namespace llmk::app {
namespace {

using json = nlohmann::ordered_json;

// The CPU, each level's verdict on it, and the level the loader takes.
json describe_cpu() {
  json cpu;
  cpu["model"] = cpu_model_name();
  const char* cap = std::getenv("LLMK_CPU_ISA");
  cpu["cap"] = cap != nullptr && cap[0] != '\0' ? json(cap) : json(nullptr);
  cpu["levels"] = json::array();
  for (const auto& level : cpu_isa_levels()) {
    json l{{"name", cpu_isa_display_name(level)}, {"description", level.description}};
    const auto missing = cpu_isa_missing(level);
    l["runs"] = missing.empty();
    if (!missing.empty()) {
      l["lacks"] = json::array();
      for (const auto m : missing) l["lacks"].push_back(std::string(m));
    }
    cpu["levels"].push_back(std::move(l));
  }
  try {
    cpu["level"] = cpu_isa_display_name(*cpu_isa_candidates().front());
  } catch (const std::exception& e) {
    cpu["error"] = e.what();  // an unknown LLMK_CPU_ISA
  }
  return cpu;
}

json describe(const PluginRegistry& registry, const std::vector<PluginRegistry::Found>& found) {
  json out;
  out["cpu"] = describe_cpu();
  out["search_path"] = json::array();
  for (const auto& dir : registry.search_path()) out["search_path"].push_back(dir.string());
  out["plugins"] = json::array();
  for (const auto& f : found) {
    json p;
    p["file"] = f.info.file.string();
    p["cpu_level"] = f.info.isa;
    if (!f.error.empty()) {
      p["error"] = f.error;
    } else if (!f.cpu_lacks.empty()) {
      p["cpu_lacks"] = f.cpu_lacks;  // a level this CPU cannot run: not opened
    } else {
      p["name"] = f.info.name;
      p["kind"] = plugin_kind_name(f.info.kind);
      p["version"] = f.info.version;
      p["abi_version"] = f.info.abi_version;
      p["api_version"] = api_version_text(f.info.api_version);
      p["description"] = f.info.description;
      // Capabilities are JSON; keep them as text when a plugin writes something else.
      const auto caps = json::parse(f.info.capabilities, nullptr, false);
      p["capabilities"] = caps.is_discarded() ? json(f.info.capabilities) : caps;
    }
    out["plugins"].push_back(std::move(p));
  }
  return out;
}

void print_text(const json& d) {
  const json& cpu = d["cpu"];
  std::cout << "cpu: " << (cpu["model"].get<std::string>().empty() ? "(model unknown)" : cpu["model"].get<std::string>())
            << "\n";
  for (const auto& l : cpu["levels"]) {
    std::cout << "  level " << l["name"].get<std::string>() << " (" << l["description"].get<std::string>() << "): ";
    if (l["runs"].get<bool>()) {
      std::cout << "runs here\n";
      continue;
    }
    std::string lacks;
    for (const auto& m : l["lacks"]) lacks += (lacks.empty() ? "" : ", ") + m.get<std::string>();
    std::cout << "lacks " << lacks << "\n";
  }
  if (cpu.contains("error")) {
    std::cout << "  error: " << cpu["error"].get<std::string>() << "\n";
  } else {
    std::cout << "  plugins load at level " << cpu["level"].get<std::string>()
              << (cpu["cap"].is_null() ? "" : " (LLMK_CPU_ISA=" + cpu["cap"].get<std::string>() + ")") << "\n";
  }
  std::cout << "\n";
  std::cout << "search path:\n";
  for (const auto& dir : d["search_path"]) std::cout << "  " << dir.get<std::string>() << "\n";
  size_t num_ok = 0, num_failed = 0, num_other_cpu = 0;
  for (const auto& p : d["plugins"]) {
    std::cout << "\n";
    if (p.contains("error")) {
      ++num_failed;
      std::cout << p["file"].get<std::string>() << "\n  error: " << p["error"].get<std::string>() << "\n";
      continue;
    }
    if (p.contains("cpu_lacks")) {
      ++num_other_cpu;
      std::cout << p["file"].get<std::string>() << "\n  CPU level " << p["cpu_level"].get<std::string>()
                << ": not loaded, this CPU lacks " << p["cpu_lacks"].get<std::string>() << "\n";
      continue;
    }
    ++num_ok;
    std::cout << p["name"].get<std::string>() << " (" << p["kind"].get<std::string>() << ") "
              << p["version"].get<std::string>() << ", CPU level " << p["cpu_level"].get<std::string>() << "\n"
              << "  " << p["description"].get<std::string>() << "\n"
              << "  abi " << p["abi_version"].get<uint32_t>() << ", api " << p["api_version"].get<std::string>()
              << "\n"
              << "  file: " << p["file"].get<std::string>() << "\n"
              << "  capabilities: " << p["capabilities"].dump() << "\n";
  }
  std::cout << "\n" << num_ok << " plugin(s) loaded, " << num_failed << " failed";
  if (num_other_cpu > 0) std::cout << ", " << num_other_cpu << " for CPU levels this machine lacks";
  std::cout << "\n";
}

const CommandRegistration kPlugins{
    "plugins", "List the plugins on the search path: name, kind, versions, file, capabilities", [](CLI::App& cmd) {
      auto dirs = std::make_shared<std::vector<std::string>>();
      auto conformance = std::make_shared<bool>(false);
      auto paths = std::make_shared<std::vector<std::string>>();
      auto config_file = std::make_shared<std::string>();
      auto overrides = std::make_shared<std::vector<std::string>>();
      auto as_json = std::make_shared<bool>(false);
      cmd.add_option("--plugin-dir", *dirs,
                     "extra directory to search (repeatable; after $LLMK_PLUGIN_PATH, before the built-in ones)");
      cmd.add_option("--config", *config_file, "YAML engine configuration: its plugins.search_path is searched too");
      cmd.add_option("--set", *overrides, "KEY=VALUE configuration override (repeatable)");
      cmd.add_flag("--json", *as_json, "print one JSON object");
      cmd.add_flag("--conformance", *conformance,
                   "run the conformance suite of each plugin's kind on the plugin files given, or on every plugin "
                   "found; exits 1 when any case fails");
      cmd.add_option("paths", *paths,
                     "plugin files, or plugin names on the search path, to check (with --conformance)");
      return std::function<int()>([dirs, config_file, overrides, as_json, conformance, paths] {
        const EngineConfig cfg = load_config(*config_file, *overrides);
        std::vector<std::filesystem::path> search(dirs->begin(), dirs->end());
        search.insert(search.end(), cfg.plugins.search_path.begin(), cfg.plugins.search_path.end());
        PluginRegistry registry(search);
        if (*conformance) return run_conformance(registry, *paths);
        if (!paths->empty()) throw Error(ErrorCode::invalid_argument, "plugin files are checked with --conformance");
        const json d = describe(registry, registry.discover());
        if (*as_json) {
          std::cout << d.dump(2) << "\n";
        } else {
          print_text(d);
        }
        return 0;
      });
    }};

}  // namespace
}  // namespace llmk::app
