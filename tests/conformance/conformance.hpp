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

// One plugin file: a plugin at one CPU level (core/cpu_isa.hpp).
struct PluginFile {
  std::string name;
  std::string isa;
};

// The files discovery finds of `kind` at CPU level `isa` that this CPU runs
// (as discover_plugins, one entry per plugin name).
std::vector<PluginFile> discover_plugin_files(PluginRegistry& registry, llmk_plugin_kind kind, const std::string& isa);

// Why the suites cannot run CPU level `isa` here (this build has no such
// level, or this CPU lacks its features); empty when they can.
std::string cpu_level_unavailable(const std::string& isa);
std::vector<std::filesystem::path> conformance_dirs(std::vector<std::filesystem::path> extra_dirs = {});

SuiteResult run_attention_suite(const Plugin& plugin);
SuiteResult run_linear_suite(const Plugin& plugin);

// Inside a TEST_CASE: runs `suite` on every plugin file of `kind` at CPU
// level `isa` and checks each passes with at least one case (a plugin that
// refuses the whole grid is not conformant either); a level this machine
// cannot run skips for real.
void check_plugins_at(llmk_plugin_kind kind, const std::string& isa, SuiteResult (*suite)(const Plugin&));

}  // namespace llmk::conformance
