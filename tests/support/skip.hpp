// A test whose feature is absent in this build or on this machine skips for
// real: LLMK_SKIP prints a marker that CTest's SKIP_REGULAR_EXPRESSION
// (tests/CMakeLists.txt) turns into "Skipped" in the summary, then leaves the
// test case. Catch2 v2 has no skip of its own.
#pragma once

#include <cstdio>
#include <string>

namespace llmk::test {

inline void announce_skip(const std::string& reason) {
  std::printf("LLMK_TEST_SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
}

}  // namespace llmk::test

// Use only in the body of a TEST_CASE (it returns from it), before any
// assertion has run.
#define LLMK_SKIP(reason)                  \
  do {                                     \
    ::llmk::test::announce_skip(reason);   \
    return;                                \
  } while (0)
