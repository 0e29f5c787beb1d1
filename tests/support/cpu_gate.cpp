// llmk_cpu_gate <level> <program> [args...]: runs a test program built for a
// CPU level (core/cpu_isa.hpp) only on a CPU that has the level's features.
// Elsewhere it prints the skip marker tests/support/skip.hpp prints, which
// CTest counts as a skip: such a program may use the level's instructions
// anywhere, even before its main(), so it must not be started at all.
// The program runs many test cases as one CTest test, so the gate makes a
// case that skips inside it print another marker (LLMK_TEST_SKIP_MARKER):
// CTest's skip pattern would otherwise mark the whole run skipped, failures
// and all.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/cpu_isa.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <cpu level> <program> [args...]\n", argv[0]);
    return 2;
  }
  try {
    const std::string missing = llmk::cpu_isa_missing_text(llmk::cpu_isa_level(argv[1]));
    if (!missing.empty()) {
      std::printf("LLMK_TEST_SKIPPED: this CPU lacks %s (CPU level %s)\n", missing.c_str(), argv[1]);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  std::fflush(stdout);
  setenv("LLMK_TEST_SKIP_MARKER", "LLMK_CASE_SKIPPED", 1);
  execv(argv[2], argv + 2);
  std::perror(argv[2]);
  return 127;
}
