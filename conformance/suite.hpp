// Conformance suites in the spirit of ggml's test-backend-ops: a plugin of a
// kind is run over one grid of cases against a float64 reference (KV
// allocators: against a shadow model), with a
// named tolerance per dtype or scheme. Any plugin file is covered with no
// test code written: it declares what it serves in its capabilities JSON,
// and a case it refuses through supports() is counted as unsupported, never
// as a pass. `llmk plugins --conformance` and tests/conformance both run
// these.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "conformance/device.hpp"
#include "core/plugin_loader.hpp"

namespace llmk::conformance {

enum class CaseStatus { passed, failed, unsupported };

struct CaseResult {
  std::string name;
  CaseStatus status = CaseStatus::passed;
  std::string measure;   // what `error` is: "max |error|", "error / bound", ...
  double error = 0;      // the case's error measure (+inf when it broke a contract)
  double tolerance = 0;  // the most `error` may be
  std::string detail;    // why it failed or was refused, where it failed worst
};

struct SuiteResult {
  std::string plugin;
  std::string device;              // where it ran: "cpu", "simulated device (no GPU)", ...
  std::vector<CaseResult> cases;
  std::vector<std::string> errors;  // failures outside any case (capabilities the suite cannot read)
  std::vector<std::string> notes;   // tolerances the plugin's capabilities widened, and why

  int num(CaseStatus status) const;
  int num_passed() const { return num(CaseStatus::passed); }
  int num_unsupported() const { return num(CaseStatus::unsupported); }
  // "case: what went wrong" for every failed case and error.
  std::vector<std::string> failures() const;
  // Conformant: no failure, and at least one case passed (a plugin that
  // refuses the whole grid is not conformant either).
  bool conformant() const { return failures().empty() && num_passed() > 0; }
};

struct SuiteOptions {
  Device* device = nullptr;  // where the plugin's buffers live; the host when null
  // The attention grid at contexts up to 300 instead of 2047: for the
  // simulated device, where every GPU thread is a fiber on the CPU.
  bool reduced = false;
};

// A result before any case: the plugin's name and where it runs.
SuiteResult new_result(const Plugin& plugin, const Device& device);

SuiteResult run_attention_suite(const Plugin& plugin, const SuiteOptions& options = {});
SuiteResult run_linear_suite(const Plugin& plugin, const SuiteOptions& options = {});
// KV allocators: random workloads against a shadow model (kv_harness.hpp);
// `reduced` runs 500 operations per case instead of 2000.
SuiteResult run_kv_allocator_suite(const Plugin& plugin, const SuiteOptions& options = {});
// Communicators: collective over the launch (every rank runs it together,
// under mpirun; alone, a world of one); each rank reports its own results.
// `reduced`: the large all-reduce at 65537 elements instead of 300007.
SuiteResult run_comm_suite(const Plugin& plugin, const SuiteOptions& options = {});
// Proposers: batches of sequences whose answers must keep llmk_proposer.h's
// rules (well-formed trees within the requests' limits and the
// vocabulary), be deterministic (again, on a second proposer, one sequence
// at a time) and survive releases of any id (conformance/proposer_suite.cpp).
SuiteResult run_proposer_suite(const Plugin& plugin, const SuiteOptions& options = {});

// The suite for the plugin's kind; false (with why) for a kind that has none.
bool has_suite(llmk_plugin_kind kind, std::string& why);
SuiteResult run_suite(const Plugin& plugin, const SuiteOptions& options = {});

// The notes, then per case: pass/FAIL/unsupported, the name, the error
// measure against its tolerance; then the totals.
void print_report(std::ostream& out, const SuiteResult& result);

// Runs the suite of the plugin's kind and prints a header line (the plugin,
// its kind and CPU level, `file`, where it runs: `device_note` when given,
// else the device's description), then the report. Returns whether it
// conforms; a kind without a suite here is said so and counts as not
// checked (true).
bool check_and_report(std::ostream& out, const Plugin& plugin, const std::string& file, const SuiteOptions& options,
                      const std::string& device_note = "");

// The devices a plugin's capabilities name ("devices"; the CPU when none).
bool serves_cpu(const PluginInfo& info);

// Plugin names of `kind` that discovery finds and that serve host memory
// (one per name).
std::vector<std::string> discover_plugins(PluginRegistry& registry, llmk_plugin_kind kind);

// One plugin file: a plugin at one CPU level (core/cpu_isa.hpp).
struct PluginFile {
  std::string name;
  std::string isa;
};

// The files discovery finds of `kind` at CPU level `isa` that serve host
// memory and this CPU runs (one entry per plugin name).
std::vector<PluginFile> discover_plugin_files(PluginRegistry& registry, llmk_plugin_kind kind, const std::string& isa);

// Why the suites cannot run CPU level `isa` here (this build has no such
// level, or this CPU lacks its features); empty when they can.
std::string cpu_level_unavailable(const std::string& isa);

// `extra_dirs` plus the folders in LLMK_CONFORMANCE_PATH (colon-separated).
std::vector<std::filesystem::path> conformance_dirs(std::vector<std::filesystem::path> extra_dirs = {});

}  // namespace llmk::conformance
