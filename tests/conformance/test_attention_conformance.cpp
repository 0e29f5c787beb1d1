// Every attention plugin on the search path against the float64 reference,
// and proof that the suite catches a plugin whose causal mask is off by one
// and one that ignores the sliding window.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "conformance.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::conformance;

// The two checks of the suite itself run the whole grid on a broken copy of
// attention.cpu: the release build runs them; under the sanitizers (89 s of
// the sanitized suite on two cores) they would only sanitize attention.cpu's
// code a second time.
#define SKIP_WHEN_SANITIZED()                                                                            \
  do {                                                                                                   \
    if (std::getenv("LLMK_TEST_SANITIZED") != nullptr)                                                   \
      LLMK_SKIP("the suite's own checks run in the release build (LLMK_TEST_SANITIZED is set)");        \
  } while (0)

TEST_CASE("every attention plugin at the baseline CPU level matches the float64 reference on the conformance grid",
          "[conformance][attention]") {
  check_plugins_at(LLMK_PLUGIN_ATTENTION, "baseline", &run_attention_suite);
}

TEST_CASE("every attention plugin built for AVX-512 passes the conformance grid on a CPU that has it",
          "[conformance][attention][cpu_level]") {
  check_plugins_at(LLMK_PLUGIN_ATTENTION, "avx512", &run_attention_suite);
}

TEST_CASE("every attention plugin built for AVX-512 BF16 and VNNI passes the conformance grid on a CPU that has them",
          "[conformance][attention][cpu_level]") {
  check_plugins_at(LLMK_PLUGIN_ATTENTION, "avx512bf16", &run_attention_suite);
}

TEST_CASE("the attention suite fails a copy of attention.cpu whose causal mask is off by one",
          "[conformance][attention]") {
  SKIP_WHEN_SANITIZED();
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  const auto names = discover_plugins(registry, LLMK_PLUGIN_ATTENTION);
  REQUIRE(std::find(names.begin(), names.end(), "attention.maskbug") != names.end());
  const SuiteResult r = run_attention_suite(registry.load("attention.maskbug", LLMK_PLUGIN_ATTENTION));
  INFO(r.num_passed() << " passed, " << r.num_unsupported() << " unsupported, " << r.failures().size() << " failed");
  CHECK(r.num_passed() == 0);
  REQUIRE_FALSE(r.failures().empty());
  CAPTURE(r.failures().front());
}

TEST_CASE("the attention suite fails a copy of attention.cpu that ignores the sliding window, and only there",
          "[conformance][attention]") {
  SKIP_WHEN_SANITIZED();
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  const SuiteResult r = run_attention_suite(registry.load("attention.nowindow", LLMK_PLUGIN_ATTENTION));
  INFO(r.num_passed() << " passed, " << r.num_unsupported() << " unsupported, " << r.failures().size() << " failed");
  // Without a window it is attention.cpu itself: those cases pass.
  CHECK(r.num_passed() > 0);
  REQUIRE_FALSE(r.failures().empty());
  // Every windowed case fails (3 head shapes x 3 KV dtypes x 3 windows, and
  // 2 windows beside sinks), and nothing else does.
  CHECK(r.failures().size() == 45);
  for (const auto& f : r.failures()) CHECK_THAT(f, Catch::Contains("sliding window"));
}

TEST_CASE("the attention suite fails a copy of attention.cpu that ignores attention sinks, and only there",
          "[conformance][attention][sinks]") {
  SKIP_WHEN_SANITIZED();
  PluginRegistry registry({LLMK_CONFORMANCE_FIXTURE_DIR});
  const SuiteResult r = run_attention_suite(registry.load("attention.nosinks", LLMK_PLUGIN_ATTENTION));
  INFO(r.num_passed() << " passed, " << r.num_unsupported() << " unsupported, " << r.failures().size() << " failed");
  CHECK(r.num_passed() > 0);
  // 3 head shapes x 3 sink settings x 3 KV dtypes, and nothing else.
  CHECK(r.failures().size() == 27);
  for (const auto& f : r.failures()) CHECK_THAT(f, Catch::Contains(" sinks "));
}
