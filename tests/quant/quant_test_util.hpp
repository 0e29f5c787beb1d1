// Shared helpers of the quantization tests: random data, aligned buffers and
// float64 references.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

namespace llmk::test {

// Gaussian values with a few outliers (as real activations and weights have),
// and an all-zero row when zero_row >= 0.
inline std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, int64_t zero_row = -1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng);
      if (pick(rng) == 0) v *= 8.0f;
      m[static_cast<size_t>(r * cols + c)] = r == zero_row ? 0.0f : v;
    }
  return m;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using AlignedBuffer = std::unique_ptr<T[], FreeDeleter>;

template <class T>
AlignedBuffer<T> aligned_buffer(size_t count) {
  const size_t bytes = (count * sizeof(T) + 63) / 64 * 64 + 64;
  return AlignedBuffer<T>(static_cast<T*>(std::aligned_alloc(64, bytes)));
}

// Unit roundoff of f32.
constexpr double kF32Eps = 5.960464477539063e-08;

}  // namespace llmk::test
