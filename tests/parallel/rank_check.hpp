// A tiny harness for test programs that run as several ranks under mpirun:
// each rank counts its failed checks and prints them with its rank; the
// job's result is the sum over the world, reported by rank 0 (exit code 1
// when any rank failed). A skip prints the marker CTest counts as skipped.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/communicator.hpp"

namespace llmk::test {

class RankCheck {
 public:
  explicit RankCheck(std::shared_ptr<Communicator> world) : world_(std::move(world)) {}

  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", world_->rank(), what.c_str());
  }

  // Collective: the sum of every rank's failures; rank 0 prints the verdict.
  int finish(const char* name) {
    float total = static_cast<float>(failures_);
    world_->all_reduce(&total, 1);
    if (world_->rank() == 0)
      std::printf("%s: %d ranks, %d failed checks: %s\n", name, world_->size(), static_cast<int>(total),
                  total == 0 ? "PASSED" : "FAILED");
    std::fflush(stdout);
    return total == 0 ? 0 : 1;
  }

 private:
  std::shared_ptr<Communicator> world_;
  int failures_ = 0;
};

}  // namespace llmk::test
