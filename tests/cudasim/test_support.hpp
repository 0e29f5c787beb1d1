// Helpers shared by the cudasim tests: device buffers, the seeds every
// scheduling-sensitive test runs under, float64 references.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cudasim.hpp"

#define CUDA_REQUIRE(expr)                                                                          \
  do {                                                                                              \
    const cudaError_t cudasim_status_ = (expr);                                                     \
    INFO(#expr << " -> " << cudaGetErrorName(cudasim_status_) << " " << cudasim::last_error_detail()); \
    REQUIRE(cudasim_status_ == cudaSuccess);                                                        \
  } while (0)

namespace llmk::cudasim_test {

// Seeds of the thread and block orders; each scheduling-sensitive test runs under all.
inline const std::vector<std::uint64_t> seeds = {1, 2, 3, 17, 2024};

// Clean slate for a test: race check failing launches, no pending error.
inline void reset_simulator(std::uint64_t seed) {
  cudasim::set_seed(seed);
  cudasim::set_race_mode(cudasim::race_mode::fail);
  cudasim::clear_races();
  (void)cudaGetLastError();
}

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
