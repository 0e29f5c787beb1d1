// The thread that builds an Engine keeps no OpenMP workers once the model is
// loaded (core/openmp.hpp): left behind, they make libgomp stop the
// executor's workers from spinning between parallel regions.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "engine_fixture.hpp"

namespace {

size_t threads_in_process() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Threads of this process while an Engine with `compute_threads` exists,
// the Engine built on a thread of its own (so no earlier pool is reused).
size_t threads_with_engine(uint32_t compute_threads) {
  size_t n = 0;
  std::thread builder([&] {
    llmk::EngineConfig cfg = llmk::test::stories_config();
    cfg.executor.num_threads = compute_threads;
    llmk::Engine engine(cfg);
    // Released workers leave /proc/self/task shortly after they exit: wait
    // until the count holds still (at most 2 s on a loaded machine).
    n = threads_in_process();
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const size_t now = threads_in_process();
      if (now == n && i >= 4) break;
      n = now;
    }
  });
  builder.join();
  return n;
}

}  // namespace

TEST_CASE("building an Engine leaves the building thread no OpenMP workers", "[engine][openmp]") {
  // The load runs parallel regions on the building thread (packing, KV
  // prefault) with the compute thread count; the executor's own team starts
  // only with the first forward. So the engine's threads must not depend on
  // the compute thread count.
  const size_t one = threads_with_engine(1), three = threads_with_engine(3);
  CHECK(three == one);
}
