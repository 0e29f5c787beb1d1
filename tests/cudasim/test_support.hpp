// Helpers shared by the cudasim tests: device buffers, the seeds every
// scheduling-sensitive test runs under, float64 references.
//
// The same test files build two ways:
//   test_cudasim       against the simulation (cudasim.hpp, libllmk_cudasim)
//   test_cuda_native   against the real CUDA runtime, cuBLAS and cuBLASLt, with
//                      the kernels compiled by nvcc (tests/cudasim/native),
//                      LLMK_CUDA_NATIVE=1. Tests of the simulation itself (its
//                      race reports, seeds, emulated error details) are
//                      compiled out there with `#if !LLMK_CUDA_NATIVE`.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#ifndef LLMK_CUDA_NATIVE
#define LLMK_CUDA_NATIVE 0
#endif

#if LLMK_CUDA_NATIVE

#include <cuda_runtime.h>

#define CUDA_REQUIRE(expr)                                                                            \
  do {                                                                                                \
    const cudaError_t cuda_status_ = (expr);                                                          \
    INFO(#expr << " -> " << cudaGetErrorName(cuda_status_) << " " << cudaGetErrorString(cuda_status_)); \
    REQUIRE(cuda_status_ == cudaSuccess);                                                             \
  } while (0)

// On the GPU, shared-memory races are compute-sanitizer's (racecheck in
// scripts/gpu-check.sh); the launch itself must still have succeeded.
#define REQUIRE_NO_SIMULATED_RACES() CUDA_REQUIRE(cudaDeviceSynchronize())

#else

#include "cudasim.hpp"

#define CUDA_REQUIRE(expr)                                                                          \
  do {                                                                                              \
    const cudaError_t cudasim_status_ = (expr);                                                     \
    INFO(#expr << " -> " << cudaGetErrorName(cudasim_status_) << " " << cudasim::last_error_detail()); \
    REQUIRE(cudasim_status_ == cudaSuccess);                                                        \
  } while (0)

// The simulation's race check saw no unsynchronised shared-memory access.
#define REQUIRE_NO_SIMULATED_RACES() REQUIRE(cudasim::race_count() == 0)

#endif

namespace llmk::cudasim_test {

#if LLMK_CUDA_NATIVE

// A GPU has one schedule per run, chosen by the hardware: one pass.
inline const std::vector<std::uint64_t> seeds = {1};

// Clean slate for a test: no pending error (the seed has no meaning on a GPU).
inline void reset_simulator(std::uint64_t /*seed*/) { (void)cudaGetLastError(); }

#else

// Seeds of the thread and block orders; each scheduling-sensitive test runs under all.
inline const std::vector<std::uint64_t> seeds = {1, 2, 3, 17, 2024};

// Clean slate for a test: nothing queued, race check failing launches, no
// pending error or hazard.
inline void reset_simulator(std::uint64_t seed) {
  (void)cudaDeviceSynchronize();  // an earlier test's queued work runs under its own settings
  cudasim::set_seed(seed);
  cudasim::set_race_mode(cudasim::race_mode::fail);
  cudasim::clear_races();
  cudasim::clear_hazards();
  (void)cudaGetLastError();
}

#endif

// A device allocation of `size` elements of T, freed on scope exit.
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t size) : size_(size) {
    CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), size * sizeof(T)));
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  ~device_buffer() { cudaFree(ptr_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == size_);
    CUDA_REQUIRE(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    CUDA_REQUIRE(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t size_;
};

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int> random_ints(std::size_t n, std::uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (int& x : v) x = dist(rng);
  return v;
}

}  // namespace llmk::cudasim_test
