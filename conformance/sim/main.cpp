// llmk-conformance-sim: the conformance suite of a CUDA plugin on the
// simulated device (tests/cudasim), for machines without a GPU. `llmk
// plugins --conformance` runs it for a plugin that names a CUDA device when
// no device is present. It never opens the plugin file it is given: it loads
// the file's simulated twin, the same source built against the CUDA
// simulation (the twins' folder, LLMK_CUDASIM_PLUGIN_DIR), and runs the
// reduced grid (every simulated GPU thread is a fiber on the CPU).
//
//   llmk-conformance-sim PLUGIN_NAME [FILE]
//
// Exit status: 0 conformant, 1 not, 2 the twin could not be loaded.
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "conformance/suite.hpp"
#include "core/plugin_loader.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: llmk-conformance-sim PLUGIN_NAME [FILE]\n";
    return 2;
  }
  const std::string name = argv[1];
  std::string stem = name;
  for (char& c : stem)
    if (c == '.') c = '_';
  const std::filesystem::path twin = std::filesystem::path(LLMK_CUDASIM_PLUGIN_DIR) / ("libllmk_" + stem + ".so");
  const std::string file = argc == 3 ? argv[2] : twin.string();
  try {
    llmk::PluginRegistry registry;
    const llmk::Plugin plugin = registry.load_file(twin);
    const auto device = llmk::conformance::make_cuda_device("simulated device (no GPU)");
    const std::string note = "simulated device (no GPU): " + twin.string() +
                             ", the same source built against the CUDA simulation; reduced grid";
    return llmk::conformance::check_and_report(std::cout, plugin, file, {device.get(), true}, note) ? 0 : 1;
  } catch (const std::exception& e) {
    std::cout << name << " " << file << "\n  FAIL  on the simulated device (no GPU): " << e.what() << "\n";
    return 2;
  }
}
