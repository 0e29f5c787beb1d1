// Catch2 side of the conformance suites (conformance/suite.hpp): the tests
// run every plugin discovery finds, at each CPU level.
#pragma once

#include <string>

#include "conformance/suite.hpp"

namespace llmk::conformance {

// Inside a TEST_CASE: runs `suite` on every plugin file of `kind` at CPU
// level `isa` that serves host memory (on the default search path plus the
// folders in LLMK_CONFORMANCE_PATH), and checks each conforms (no failure,
// at least one case passed); a level this machine cannot run skips for real.
void check_plugins_at(llmk_plugin_kind kind, const std::string& isa,
                      SuiteResult (*suite)(const Plugin&, const SuiteOptions&));

}  // namespace llmk::conformance
