// `llmk plugins --conformance [PATH...]`: the conformance suite of each
// plugin's kind (conformance/suite.hpp), per case, on the device it serves.
#pragma once

#include <string>
#include <vector>

#include "core/plugin_loader.hpp"

namespace llmk::app {

// Checks each file in `paths` (a plugin name there, such as proposer.ngram,
// checks its files on the search path), or every plugin file discovery finds
// when it is empty. Returns the exit status: 0 when every checked plugin conforms,
// 1 when any case fails or a plugin cannot be loaded or run.
int run_conformance(PluginRegistry& registry, const std::vector<std::string>& paths);

}  // namespace llmk::app
