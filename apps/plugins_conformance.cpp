// Where each plugin runs: a CPU plugin in this process on host memory; a
// CUDA plugin on the CUDA device when this build has CUDA and a device is
// present, else on the simulated device through llmk-conformance-sim (beside
// this binary in a build tree with the tests; $LLMK_CONFORMANCE_SIM names
// another), which runs the plugin's twin built against the CUDA simulation.
#include "apps/plugins_conformance.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "conformance/suite.hpp"
#include "core/error.hpp"

namespace llmk::app {
namespace {

namespace fs = std::filesystem;

std::optional<fs::path> simulation_runner() {
  if (const char* env = std::getenv("LLMK_CONFORMANCE_SIM"); env != nullptr && env[0] != '\0') return fs::path(env);
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  const fs::path runner = self.parent_path() / "llmk-conformance-sim";
  if (fs::exists(runner, ec)) return runner;
  return std::nullopt;
}

// Runs the runner for one plugin and returns its exit status (its report
// goes to our stdout).
int run_simulated(const fs::path& runner, const PluginInfo& info, const std::string& file) {
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) {
    std::cout << "  FAIL  could not start " << runner.string() << "\n";
    return 1;
  }
  if (pid == 0) {
    execl(runner.c_str(), runner.c_str(), info.name.c_str(), file.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
    std::cout << "  FAIL  " << runner.string() << " did not finish\n";
    return 1;
  }
  if (WEXITSTATUS(status) == 127) std::cout << "  FAIL  could not run " << runner.string() << "\n";
  return WEXITSTATUS(status);
}

// A CUDA plugin: on the device when there is one, else simulated. True when it conforms.
bool check_cuda_plugin(const Plugin& plugin, const std::string& file) {
  std::string no_device = "this build has no CUDA";
#ifdef LLMK_CONFORMANCE_HAVE_CUDA
  try {
    const auto device = conformance::make_cuda_device("CUDA device");
    return conformance::check_and_report(std::cout, plugin, file, {device.get(), false});
  } catch (const std::exception& e) {
    no_device = e.what();
  }
#endif
  if (const auto runner = simulation_runner()) return run_simulated(*runner, plugin.info(), file) == 0;
  std::cout << plugin.info().name << " " << file << "\n  FAIL  not run: it needs a CUDA device (" << no_device
            << ") and llmk-conformance-sim, which runs it on the simulated device, is not beside llmk (a build "
               "with the tests makes it)\n";
  return false;
}

bool check_file(PluginRegistry& registry, const fs::path& file) {
  Plugin plugin;
  try {
    plugin = registry.load_file(file);
  } catch (const Error& e) {
    std::cout << file.string() << "\n  FAIL  " << e.what() << "\n";
    return false;
  }
  if (conformance::serves_cpu(plugin.info()))
    return conformance::check_and_report(std::cout, plugin, file.string(), {});
  if (plugin_serves_device(plugin.info(), "cuda")) return check_cuda_plugin(plugin, file.string());
  std::cout << plugin.info().name << " " << file.string() << "\n  FAIL  not run: its capabilities name no device "
            << "this command knows (cpu, cuda)\n";
  return false;
}

// A plugin name instead of a file: every file of that plugin in the first
// search-path directory that holds one (one per CPU level).
std::vector<fs::path> files_named(PluginRegistry& registry, const std::string& name) {
  std::vector<fs::path> files;
  for (const auto& found : registry.discover()) {
    if (found.info.name != name || !found.error.empty()) continue;
    if (!files.empty() && found.info.file.parent_path() != files.front().parent_path()) break;
    files.push_back(found.info.file);
  }
  return files;
}

}  // namespace

int run_conformance(PluginRegistry& registry, const std::vector<std::string>& paths) {
  int num_checked = 0, num_failed = 0;
  auto check = [&](const fs::path& file) {
    ++num_checked;
    if (!check_file(registry, file)) ++num_failed;
    std::cout << "\n";
  };
  if (!paths.empty()) {
    for (const auto& p : paths) {
      std::error_code ec;
      if (fs::exists(p, ec) || p.find('/') != std::string::npos) {
        check(p);
        continue;
      }
      const std::vector<fs::path> files = files_named(registry, p);
      if (files.empty()) {
        ++num_checked;
        ++num_failed;
        std::cout << p << "\n  FAIL  no such file, and no plugin of that name on the search path\n\n";
      }
      for (const auto& file : files) check(file);
    }
  } else {
    for (const auto& found : registry.discover()) {
      if (!found.cpu_lacks.empty()) {
        std::cout << found.info.file.string() << "\n  not checked: CPU level " << found.info.isa
                  << ", this CPU lacks " << found.cpu_lacks << "\n\n";
        continue;
      }
      check(found.info.file);
    }
  }
  std::cout << num_checked << " plugin file(s) checked, " << num_failed << " not conformant\n";
  return num_failed == 0 ? 0 : 1;
}

}  // namespace llmk::app
