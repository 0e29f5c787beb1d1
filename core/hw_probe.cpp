#include "core/hw_probe.hpp"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace llmk {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double measure_memory_bandwidth(size_t bytes, int repeats, int num_threads) {
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
  const size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> src(new float[n]);
  std::unique_ptr<float[]> dst(new float[n]);
  // First touch from the threads that will copy, so pages are faulted in.
#pragma omp parallel for num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    src[i] = static_cast<float>(i & 1023);
    dst[i] = 0.0f;
  }
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      const int nt = omp_get_num_threads();
      const size_t chunk = (n + nt - 1) / nt;
      const size_t begin = std::min(n, t * chunk);
      const size_t end = std::min(n, begin + chunk);
      std::memcpy(dst.get() + begin, src.get() + begin, (end - begin) * sizeof(float));
    }
    const double s = seconds_since(t0);
    best = std::max(best, 2.0 * static_cast<double>(n * sizeof(float)) / s);
  }
  return best;
}

double measure_gemm_flops(int n, int repeats, int num_threads) {
  if (num_threads > 0) openblas_set_num_threads(num_threads);
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<float> a(count, 0.5f), b(count, 0.25f), c(count, 0.0f);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms up
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
    const double s = seconds_since(t0);
    if (r > 0) best = std::max(best, 2.0 * n * static_cast<double>(n) * n / s);
  }
  return best;
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace llmk
