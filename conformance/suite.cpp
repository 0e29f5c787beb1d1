#include "conformance/suite.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "core/cpu_isa.hpp"
#include "core/plugin_api_version.hpp"

namespace llmk::conformance {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

const char* status_text(CaseStatus status) {
  switch (status) {
    case CaseStatus::passed: return "pass";
    case CaseStatus::failed: return "FAIL";
    case CaseStatus::unsupported: return "unsupported";
  }
  return "?";
}

}  // namespace

int SuiteResult::num(CaseStatus status) const {
  return static_cast<int>(
      std::count_if(cases.begin(), cases.end(), [&](const CaseResult& c) { return c.status == status; }));
}

std::vector<std::string> SuiteResult::failures() const {
  std::vector<std::string> out = errors;
  for (const auto& c : cases) {
    if (c.status != CaseStatus::failed) continue;
    std::string line = c.name + ": ";
    if (!c.measure.empty()) line += c.measure + " " + number(c.error) + " > " + number(c.tolerance);
    if (!c.detail.empty()) line += (c.measure.empty() ? "" : " (") + c.detail + (c.measure.empty() ? "" : ")");
    out.push_back(line);
  }
  return out;
}

SuiteResult new_result(const Plugin& plugin, const Device& device) {
  SuiteResult result;
  result.plugin = plugin.info().name;
  result.device = device.description();
  return result;
}

bool has_suite(llmk_plugin_kind kind, std::string& why) {
  if (kind == LLMK_PLUGIN_ATTENTION || kind == LLMK_PLUGIN_LINEAR || kind == LLMK_PLUGIN_KV_ALLOCATOR ||
      kind == LLMK_PLUGIN_COMM || kind == LLMK_PLUGIN_PROPOSER)
    return true;
  why = std::string("no conformance suite for ") + plugin_kind_name(kind) + " plugins";
  return false;
}

SuiteResult run_suite(const Plugin& plugin, const SuiteOptions& options) {
  switch (plugin.info().kind) {
    case LLMK_PLUGIN_ATTENTION: return run_attention_suite(plugin, options);
    case LLMK_PLUGIN_LINEAR: return run_linear_suite(plugin, options);
    case LLMK_PLUGIN_KV_ALLOCATOR: return run_kv_allocator_suite(plugin, options);
    case LLMK_PLUGIN_COMM: return run_comm_suite(plugin, options);
    case LLMK_PLUGIN_PROPOSER: return run_proposer_suite(plugin, options);
  }
  SuiteResult result;
  result.plugin = plugin.info().name;
  result.errors.push_back("no conformance suite for plugin kind " + std::to_string(plugin.info().kind));
  return result;
}

void print_report(std::ostream& out, const SuiteResult& r) {
  for (const auto& n : r.notes) out << "  note  " << n << "\n";
  for (const auto& c : r.cases) {
    out << "  " << status_text(c.status) << "  " << c.name;
    if (c.status == CaseStatus::unsupported) {
      out << ": " << c.detail << "\n";
      continue;
    }
    if (!c.measure.empty())
      out << ": " << c.measure << " " << number(c.error) << (c.error <= c.tolerance ? " <= " : " > ")
          << number(c.tolerance);
    if (c.status == CaseStatus::failed && !c.detail.empty()) out << (c.measure.empty() ? ": " : " (") << c.detail
                                                                 << (c.measure.empty() ? "" : ")");
    out << "\n";
  }
  for (const auto& e : r.errors) out << "  FAIL  " << e << "\n";
  out << "  " << r.num_passed() << " passed, " << r.num(CaseStatus::failed) << " failed, " << r.num_unsupported()
      << " unsupported";
  if (r.errors.empty() && r.num(CaseStatus::failed) == 0 && r.num_passed() == 0)
    out << " (no case passed: not conformant)";
  out << "\n";
}

bool check_and_report(std::ostream& out, const Plugin& plugin, const std::string& file, const SuiteOptions& options,
                      const std::string& device_note) {
  const PluginInfo& info = plugin.info();
  out << info.name << " (" << plugin_kind_name(info.kind) << ", CPU level " << info.isa << ") " << file << "\n";
  std::string why;
  if (!has_suite(info.kind, why)) {
    out << "  not checked: " << why << "\n";
    return true;
  }
  const SuiteResult result = run_suite(plugin, options);
  out << "  on " << (device_note.empty() ? result.device : device_note) << "\n";
  print_report(out, result);
  out.flush();
  return result.conformant();
}

bool serves_cpu(const PluginInfo& info) { return plugin_serves_device(info, "cpu"); }

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
    if (found.usable() && found.info.kind == kind && serves_cpu(found.info) &&
        std::find(names.begin(), names.end(), found.info.name) == names.end())
      names.push_back(found.info.name);
  return names;
}

std::vector<PluginFile> discover_plugin_files(PluginRegistry& registry, llmk_plugin_kind kind, const std::string& isa) {
  std::vector<PluginFile> files;
  for (const auto& found : registry.discover()) {
    if (!found.usable() || found.info.kind != kind || found.info.isa != isa || !serves_cpu(found.info)) continue;
    const bool seen =
        std::any_of(files.begin(), files.end(), [&](const PluginFile& f) { return f.name == found.info.name; });
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

}  // namespace llmk::conformance
