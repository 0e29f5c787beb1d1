// core/openmp.hpp: a thread done with parallel work ends its OpenMP workers,
// so that the executor's team is the only pool left to spin.
#include <catch2/catch.hpp>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/openmp.hpp"

namespace {

size_t threads_in_process() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Exited threads leave /proc/self/task shortly after they return.
size_t settle_to(size_t expected) {
  size_t n = threads_in_process();
  for (int i = 0; i < 200 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = threads_in_process();
  }
  return n;
}

}  // namespace

TEST_CASE("release_openmp_pool ends the calling thread's OpenMP workers", "[openmp]") {
  // A thread of its own, so that its pool is the only one this test makes.
  size_t before = 0, with_pool = 0, after = 0, again = 0;
  std::thread owner([&] {
    before = threads_in_process();
#pragma omp parallel num_threads(3)
    {
      (void)omp_get_thread_num();
    }
    with_pool = threads_in_process();  // the two workers stay parked in the pool
    llmk::release_openmp_pool();
    after = settle_to(before);
#pragma omp parallel num_threads(3)
    {
      (void)omp_get_thread_num();
    }
    again = threads_in_process();  // a later region starts a new pool
    llmk::release_openmp_pool();
  });
  owner.join();
  CHECK(with_pool == before + 2);
  CHECK(after == before);
  CHECK(again == before + 2);
}
