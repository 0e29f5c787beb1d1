// Machine limits measured in the benchmark's own run, so that figures can be
// printed as a fraction of what this machine does right now.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>

#include "kernels/cpu/stream_memory.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
// GCC 12 reports the intrinsics' internal undefined registers as uninitialized (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace llmk::bench {

// Read bandwidth: every thread sums its slice of a 1 GiB buffer, best of a
// few passes. The buffer is stream memory, as the weights and the KV cache
// are: on huge pages where the system offers them, so the probe is not held
// back by TLB misses the engine does not have. Kept across measurements, so
// a benchmark can probe right before each of its runs: on a shared machine
// the bandwidth left by the neighbours drifts by tens of percent within a
// minute, and a figure is fairly compared only with a probe of its moment.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe() : buf_(n_) { std::fill(buf_.data(), buf_.data() + n_, 1.0f); }

  // GB/s, the best of `passes`.
  double measure(int threads, int passes) const {
    const size_t n = n_;
    const float* data = buf_.data();
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int rep = 0; rep < passes; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const size_t begin = n * t / nt / 64 * 64, end = n * (t + 1) / nt / 64 * 64;
        total += sum_slice(data, begin, end);
      }
      sink = total;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
    }
    (void)sink;
    return best;
  }

 private:
#if defined(__AVX512F__) || defined(__AVX2__)
  // Asks for the four lines 2 KiB past the 256 bytes at p, so that the
  // probe does not depend on the hardware prefetcher alone.
  static void request_ahead(const float* p) {
    const char* line = reinterpret_cast<const char*>(p);
    for (int l = 0; l < 4; ++l) _mm_prefetch(line + 2048 + 64 * l, _MM_HINT_T0);
  }
#endif

  static float sum_slice(const float* data, size_t begin, size_t end) {
#if defined(__AVX512F__)
    // Four accumulators and the requests ahead.
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = begin; i < end; i += 64) {
      request_ahead(data + i);
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(data + i));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(data + i + 16));
      a2 = _mm512_add_ps(a2, _mm512_loadu_ps(data + i + 32));
      a3 = _mm512_add_ps(a3, _mm512_loadu_ps(data + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__)
    // Eight accumulators: one chain of dependent adds would measure the add latency, not the memory.
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    for (size_t i = begin; i < end; i += 64) {
      request_ahead(data + i);
      for (int k = 0; k < 8; ++k) a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(data + i + 8 * k));
    }
    for (int k = 1; k < 8; ++k) a[0] = _mm256_add_ps(a[0], a[k]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, a[0]);
    float total = 0.0f;
    for (float v : lanes) total += v;
    return total;
#else
    // Sixteen independent partial sums, so the loop is not bound by one chain of dependent adds.
    float part[16] = {};
    for (size_t i = begin; i < end; i += 16)
      for (int k = 0; k < 16; ++k) part[k] += data[i + k];
    float total = 0.0f;
    for (float v : part) total += v;
    return total;
#endif
  }

  static constexpr size_t n_ = (size_t{1} << 30) / sizeof(float);
  kernels::cpu::StreamArray<float> buf_;
};

// One probe of 5 passes over a fresh buffer.
inline double read_bandwidth_gbs(int threads) { return ReadBandwidthProbe().measure(threads, 5); }

}  // namespace llmk::bench
