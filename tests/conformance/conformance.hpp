// Conformance suites in the spirit of ggml's test-backend-ops: every plugin
// of a kind that discovery finds is run over one grid of cases against a
// float64 reference, with a named tolerance per dtype or scheme. A plugin
// dropped on the search path is covered with no test code written; it
// declares what it serves in its capabilities JSON, and a case it refuses
// through supports() is counted as unsupported, never as a pass.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/plugin_loader.hpp"

namespace llmk::conformance {

struct SuiteResult {
  std::string plugin;
  int num_passed = 0;
  int num_unsupported = 0;
  std::vector<std::string> failures;  // "case: what went wrong"
};

// Plugins of `kind` found on the default search path plus `extra_dirs` and
// the folders in LLMK_CONFORMANCE_PATH (colon-separated) that serve host
// memory. The suites pass host buffers, so a plugin whose capabilities list
// devices without "cpu" (attention.cuda, linear.cublas) is left to its
// device's own tests (tests/cudasim for CUDA).
std::vector<std::string> discover_plugins(PluginRegistry& registry, llmk_plugin_kind kind);
std::vector<std::filesystem::path> conformance_dirs(std::vector<std::filesystem::path> extra_dirs = {});

SuiteResult run_attention_suite(const Plugin& plugin);
SuiteResult run_linear_suite(const Plugin& plugin);

}  // namespace llmk::conformance
