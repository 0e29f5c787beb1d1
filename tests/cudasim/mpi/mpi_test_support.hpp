// Shared by the multi-process tests of the simulated NCCL and comm.nccl:
// each rank records its failures, the inputs every rank can recompute (so a
// rank checks a collective's result against its own float64 or exact
// expectation), and the ring-order sum the simulation promises
// (cudasim/nccl.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/cudasim/float_formats.hpp"

namespace llmk::mpi_test {

using cudasim_test::float_format;

// One rank's findings.
class Report {
 public:
  explicit Report(int rank) : rank_(rank) {}
  void check(bool ok, const std::string& what) {
    if (!ok) failures_.push_back(what);
  }
  int num_failures() const { return static_cast<int>(failures_.size()); }
  void print() const {
    for (const auto& f : failures_) std::fprintf(stderr, "rank %d: FAILED: %s\n", rank_, f.c_str());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::vector<std::string> failures_;
};

inline uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
inline uint32_t hash(int rank, std::size_t i, uint32_t salt) {
  return mix(static_cast<uint32_t>(i) * 0x9e3779b9u ^ mix(static_cast<uint32_t>(rank) + 0x632be5abu * salt));
}

// Rank `rank`'s element i of input `salt`: f32 values in (-8, 8) with full
// significands; 16-bit patterns of magnitude in [1/8, 8) with random
// significands, so that sums round and their order matters.
inline float input_f32(int rank, std::size_t i, uint32_t salt) {
  const uint32_t h = hash(rank, i, salt);
  return (static_cast<float>(h & 0xffffffu) / 16777216.0f * 2.0f - 1.0f) * static_cast<float>(1u << ((h >> 24) & 3u));
}
inline uint16_t input_16(int rank, std::size_t i, uint32_t salt, const float_format& format) {
  const uint32_t h = hash(rank, i, salt);
  const int fraction_bits = 15 - format.exponent_bits;
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const uint32_t exponent = static_cast<uint32_t>(bias - 3) + (h >> 20) % 6u;
  return static_cast<uint16_t>(((h >> 31) << 15) | (exponent << fraction_bits) | (h & ((1u << fraction_bits) - 1u)));
}

inline constexpr float_format kF32Format{24, -126, 0x1.fffffep127, 8};

// One addition as the simulation does it: the two 16-bit values summed in
// float (the exact sum, rounded to f32), rounded to the format.
inline double add_16(double acc, double x, const float_format& format) {
  return cudasim_test::round_to_format(cudasim_test::round_to_format(acc + x, kF32Format), format);
}

// The sum of element i over n ranks in the simulation's ring order: the
// chunk c holding i (elements [c*count/n, (c+1)*count/n)) starts at rank c
// and adds ranks c+1, ..., c+n-1 mod n. value(rank) gives the inputs.
template <class Value>
double ring_sum_16(std::size_t i, std::size_t count, int n, const float_format& format, Value value) {
  int c = 0;
  while (count * static_cast<std::size_t>(c + 1) / n <= i) ++c;
  double acc = value(c);
  for (int j = 1; j < n; ++j) acc = add_16(acc, value((c + j) % n), format);
  return acc;
}

// The same in rank order 0, 1, ..., n-1: what a test of the order must tell apart.
template <class Value>
double rank_order_sum_16(int n, const float_format& format, Value value) {
  double acc = value(0);
  for (int r = 1; r < n; ++r) acc = add_16(acc, value(r), format);
  return acc;
}

}  // namespace llmk::mpi_test
