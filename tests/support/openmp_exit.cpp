// Every test program ends the main thread's OpenMP workers on its way out,
// before LeakSanitizer's exit check (registered earlier, so run later).
// That check scans each live thread's dynamic TLS, and the one in GCC 12
// misreads it on a worker that ran oneDNN (a DTLS range in the shadow gap,
// then "Tracer caught signal 11"); with the workers gone it scans only
// threads it can read. Ending the pool changes nothing else: the program is
// exiting.
#include <omp.h>

#include <cstdlib>

namespace {

const bool registered = [] {
  std::atexit([] { omp_pause_resource_all(omp_pause_hard); });
  return true;
}();

}  // namespace
