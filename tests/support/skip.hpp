// A test whose feature is absent in this build or on this machine skips for
// real: LLMK_SKIP prints a marker that CTest's SKIP_REGULAR_EXPRESSION
// (tests/CMakeLists.txt) turns into "Skipped" in the summary, then leaves the
// test case. Catch2 v2 has no skip of its own.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace llmk::test {

// A program that runs many test cases as one CTest test (the per-level
// kernel tests behind tests/support/cpu_gate.cpp) sets LLMK_TEST_SKIP_MARKER
// to another word: one skipped case must not mark the whole run skipped.
inline void announce_skip(const std::string& reason) {
  const char* marker = std::getenv("LLMK_TEST_SKIP_MARKER");
  std::printf("%s: %s\n", marker != nullptr && marker[0] != '\0' ? marker : "LLMK_TEST_SKIPPED", reason.c_str());
  std::fflush(stdout);
}

// True in the sanitized suite: a case may run a smaller part of its grid
// there, when the rest only repeats code the part already sanitizes.
inline bool in_sanitized_suite() { return std::getenv("LLMK_TEST_SANITIZED") != nullptr; }

}  // namespace llmk::test

// Use only in the body of a TEST_CASE (it returns from it), before any
// assertion has run.
#define LLMK_SKIP(reason)                  \
  do {                                     \
    ::llmk::test::announce_skip(reason);   \
    return;                                \
  } while (0)

// A case the sanitized suite (scripts/test.sh sets LLMK_TEST_SANITIZED) leaves
// to the release build, because the sanitizers would add nothing to what
// the release run checks: e.g. a grid of shapes through code that is not
// instrumented (the simulated CUDA kernels) or that smaller cases of the
// same program already sanitize. `why` says which.
#define LLMK_SKIP_WHEN_SANITIZED(why)                                       \
  do {                                                                      \
    if (::llmk::test::in_sanitized_suite())                                 \
      LLMK_SKIP(std::string("left to the release build under the sanitizers: ") + (why)); \
  } while (0)
