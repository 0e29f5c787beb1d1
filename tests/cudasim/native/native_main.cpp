// main() of test_cuda_native: runs the Catch2 session when a CUDA device is
// visible, and otherwise reports the run skipped (the LLMK_SKIP marker, which
// CTest's SKIP_REGULAR_EXPRESSION counts as skipped) instead of failing every
// case on its first allocation. Listing the tests (CTest's discovery at build
// time) needs no device.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <string>

#include "support/skip.hpp"

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  const Catch::ConfigData& config = session.configData();
  const bool listing_only = config.showHelp || config.listTests || config.listTestNamesOnly || config.listTags ||
                            config.listReporters;
  if (!listing_only) {
    int num_devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&num_devices);
    if (status != cudaSuccess || num_devices == 0) {
      llmk::test::announce_skip(
          "no CUDA device visible (cudaGetDeviceCount: " +
          std::string(status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") +
          "); test_cuda_native runs on a machine with an NVIDIA GPU, see scripts/gpu-check.sh");
      return 0;
    }
  }
  return session.run();
}
