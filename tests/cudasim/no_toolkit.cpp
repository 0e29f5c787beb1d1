// Built instead of the cudasim tests when the CUDA toolkit's headers or
// Boost.Context are missing: the simulation needs both.
#include <catch2/catch.hpp>

#include "support/skip.hpp"

TEST_CASE("The CUDA simulation runs kernels on the CPU") {
  LLMK_SKIP("cudasim needs the CUDA toolkit headers and Boost.Context, and this build found neither or one");
}
