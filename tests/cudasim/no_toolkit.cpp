// Built instead of the cudasim tests when the build has no CUDA simulation:
// LLMK_CUDASIM=OFF (the sanitized build), or the CUDA toolkit's headers or
// Boost.Context are missing (the simulation needs both).
#include <catch2/catch.hpp>

#include "support/skip.hpp"

TEST_CASE("The CUDA simulation runs kernels on the CPU") {
  LLMK_SKIP("this build has no CUDA simulation: LLMK_CUDASIM=OFF, or the CUDA toolkit headers or Boost.Context "
            "are missing");
}
