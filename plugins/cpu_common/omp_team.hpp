// Runs a scope under a given OpenMP team size on the calling thread, and
// restores the caller's afterwards. oneDNN's OpenMP build sizes its work by
// omp_get_max_threads() when a primitive is made and when it runs, so a
// plugin wraps both in its layer's thread count.
#pragma once

#include <omp.h>

namespace llmk::cpu_common {

class OmpTeam {
 public:
  explicit OmpTeam(int threads) : saved_(omp_get_max_threads()), threads_(threads) {
    if (saved_ != threads_) omp_set_num_threads(threads_);
  }
  ~OmpTeam() {
    if (saved_ != threads_) omp_set_num_threads(saved_);
  }
  OmpTeam(const OmpTeam&) = delete;
  OmpTeam& operator=(const OmpTeam&) = delete;

 private:
  int saved_, threads_;
};

}  // namespace llmk::cpu_common
