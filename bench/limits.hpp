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

// Read bandwidth: every thread sums its slice of a 1 GiB buffer; best of 5.
// The buffer is stream memory, as the weights and the KV cache are: on huge
// pages where the system offers them, so the probe is not held back by TLB
// misses the engine does not have.
inline double read_bandwidth_gbs(int threads) {
  const size_t n = (size_t{1} << 30) / sizeof(float);
  kernels::cpu::StreamArray<float> buf(n);
  std::fill(buf.data(), buf.data() + n, 1.0f);
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t begin = n * t / nt / 64 * 64, end = n * (t + 1) / nt / 64 * 64;
#if defined(__AVX512F__)
      // Four accumulators and a software prefetch 2 KiB ahead, as the weight streaming kernels do.
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (size_t i = begin; i < end; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2048, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2112, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2176, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2240, _MM_HINT_T0);
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(buf.data() + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(buf.data() + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(buf.data() + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(buf.data() + i + 48));
      }
      total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#elif defined(__AVX2__)
      // Eight accumulators: one chain of dependent adds would measure the add latency, not the memory.
      __m256 a[8];
      for (auto& v : a) v = _mm256_setzero_ps();
      for (size_t i = begin; i < end; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2048, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2112, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2176, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 2240, _MM_HINT_T0);
        for (int k = 0; k < 8; ++k) a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(buf.data() + i + 8 * k));
      }
      for (int k = 1; k < 8; ++k) a[0] = _mm256_add_ps(a[0], a[k]);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, a[0]);
      for (float v : lanes) total += v;
#else
      // Sixteen independent partial sums, so the loop is not bound by one chain of dependent adds.
      float part[16] = {};
      for (size_t i = begin; i < end; i += 16)
        for (int k = 0; k < 16; ++k) part[k] += buf[i + k];
      for (float v : part) total += v;
#endif
    }
    sink = total;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace llmk::bench
