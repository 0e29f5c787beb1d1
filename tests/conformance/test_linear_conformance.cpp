// Every linear plugin on the search path against a float64 product, each
// within the error bound its declared quantization scheme implies.
#include <catch2/catch.hpp>

#include "conformance.hpp"

using namespace llmk;
using namespace llmk::conformance;

TEST_CASE("every linear plugin at the baseline CPU level stays within its scheme's error bound on the conformance grid",
          "[conformance][linear]") {
  check_plugins_at(LLMK_PLUGIN_LINEAR, "baseline", &run_linear_suite);
}

TEST_CASE("every linear plugin built for AVX-512 passes the conformance grid on a CPU that has it",
          "[conformance][linear][cpu_level]") {
  check_plugins_at(LLMK_PLUGIN_LINEAR, "avx512", &run_linear_suite);
}

TEST_CASE("every linear plugin built for AVX-512 BF16 and VNNI passes the conformance grid on a CPU that has them",
          "[conformance][linear][cpu_level]") {
  check_plugins_at(LLMK_PLUGIN_LINEAR, "avx512bf16", &run_linear_suite);
}
