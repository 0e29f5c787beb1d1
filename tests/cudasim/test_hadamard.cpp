// kernels/cuda/hadamard under the simulation: the block rotation against the
// float64 product with the Hadamard matrix, and bit for bit against the CPU
// engine's kernel (the executor relies on both rotating keys alike).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/hadamard.hpp"
#include "kernels/cuda/hadamard.hpp"
#include "test_support.hpp"

using namespace llmk::cudasim_test;
namespace cuda = llmk::cuda;

namespace {

// Entry (i, j) of the orthonormal Walsh-Hadamard matrix of order n (Sylvester's construction).
double hadamard_entry(int64_t i, int64_t j, int64_t n) {
  return (__builtin_popcountll(static_cast<unsigned long long>(i & j)) % 2 == 0 ? 1.0 : -1.0) /
         std::sqrt(static_cast<double>(n));
}

}  // namespace

TEST_CASE("The device Hadamard rotation matches float64 and the CPU kernel's bits", "[hadamard]") {
  for (const int64_t block : {2, 8, 64, 128, 256})
    for (const int64_t blocks : {1, 3}) {
      const int64_t n = block * blocks;
      const auto x = random_floats(static_cast<size_t>(n), 700 + block + blocks, -3.0f, 3.0f);
      std::vector<float> cpu = x;
      llmk::kernels::cpu::hadamard_blocks(cpu.data(), n, block);
      for (auto seed : seeds) {
        reset_simulator(seed);
        INFO("block " << block << " blocks " << blocks << " seed " << seed);
        device_buffer<float> d(x);
        CUDA_REQUIRE(cuda::hadamard_blocks(d.get(), n, block, nullptr));
        REQUIRE_NO_SIMULATED_RACES();
        const auto got = d.download();
        REQUIRE(std::memcmp(got.data(), cpu.data(), got.size() * sizeof(float)) == 0);
        for (int64_t b0 = 0; b0 < n; b0 += block)
          for (int64_t i = 0; i < block; ++i) {
            double want = 0.0, mag = 0.0;
            for (int64_t j = 0; j < block; ++j) {
              want += hadamard_entry(i, j, block) * x[b0 + j];
              mag += std::abs(x[b0 + j]) / std::sqrt(static_cast<double>(block));
            }
            // log2(block) rounded f32 additions, then the scaling.
            REQUIRE(std::abs(got[b0 + i] - want) <= 1e-6 * mag * (std::log2(block) + 1));
          }
      }
    }
}

TEST_CASE("The device Hadamard rotation refuses blocks that are not powers of two", "[hadamard]") {
  reset_simulator(1);
  device_buffer<float> d(std::vector<float>(48, 1.0f));
  REQUIRE(cuda::hadamard_blocks(d.get(), 48, 12, nullptr) == cudaErrorInvalidValue);
  REQUIRE(cuda::hadamard_blocks(d.get(), 48, 32, nullptr) == cudaErrorInvalidValue);  // 48 is not a multiple
  REQUIRE(cuda::hadamard_blocks(d.get(), 48, 2048, nullptr) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cuda::hadamard_blocks(d.get(), 48, 1, nullptr));  // the identity: nothing to launch
  REQUIRE(d.download() == std::vector<float>(48, 1.0f));
}
