// Every linear plugin on the search path against a float64 product, each
// within the error bound its declared quantization scheme implies.
#include <catch2/catch.hpp>

#include "conformance.hpp"

using namespace llmk;
using namespace llmk::conformance;

TEST_CASE("every discovered linear plugin stays within its scheme's error bound on the conformance grid",
          "[conformance][linear]") {
  PluginRegistry registry(conformance_dirs());
  const auto names = discover_plugins(registry, LLMK_PLUGIN_LINEAR);
  REQUIRE_FALSE(names.empty());  // linear.dense is always built
  for (const auto& name : names) {
    const SuiteResult r = run_linear_suite(registry.load(name, LLMK_PLUGIN_LINEAR));
    INFO(name << ": " << r.num_passed << " passed, " << r.num_unsupported << " unsupported");
    for (const auto& f : r.failures) FAIL_CHECK(name << ": " << f);
    CHECK(r.num_passed > 0);
  }
}
