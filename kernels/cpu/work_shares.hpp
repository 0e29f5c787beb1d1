// Parallel loops whose threads share out the items unevenly when they run
// unevenly. A linear pass streams its weights once: a static split gives each
// thread one contiguous share of the output (one long stream per thread, which
// is what the hardware prefetchers follow best), but on a shared machine one
// core often runs slower than the other for a whole process or a burst (a busy
// SMT sibling, an interrupt, a vCPU descheduled), and the region waits for the
// slowest share (on a 2-vCPU VM one thread took 11-15% longer than the other
// in every region of a process: docs/PERFORMANCE.md). for_each_item keeps
// the contiguous shares and lets a thread that has finished its own take the
// remaining items from the far end of the others' shares, so the streams stay
// long and no thread idles while another still has more than one item left.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>
#include <type_traits>

namespace llmk::kernels::cpu {

// Items [0, n) in one contiguous share per thread, made before a parallel
// region; each thread of the region then calls take(). Thread t first takes
// share t's items in ascending order, then the other shares' from their far
// ends, descending, until none is left. Every item is taken exactly once
// whatever the team's size (a thread with no share of its own only takes).
class WorkShares {
 public:
  // Teams larger than this share kMaxShares shares; their extra threads only take.
  static constexpr int kMaxShares = 512;

  // threads: the team size the shares are cut for.
  WorkShares(int64_t n, int threads) : count_(static_cast<int>(std::clamp<int64_t>(threads, 1, kMaxShares))) {
    // Only the shares in use are constructed (a 2-thread pass touches two lines, not 32 KiB).
    for (int s = 0; s < count_; ++s) new (&share(s)) Share{n * s / count_, n * (s + 1) / count_};
  }
  WorkShares(const WorkShares&) = delete;
  WorkShares& operator=(const WorkShares&) = delete;

  int count() const { return count_; }

  // item(i, thread) for each item this thread takes.
  template <class Item>
  void take(int thread, const Item& item) {
    for (int d = 0; d < count_; ++d) {
      Share& sh = share((thread + d) % count_);
      const bool own = d == 0 && thread < count_;
      while (sh.grant()) {
        const int64_t i = own ? sh.begin + sh.front.fetch_add(1, std::memory_order_relaxed)
                              : sh.end - 1 - sh.back.fetch_add(1, std::memory_order_relaxed);
        item(i, thread);
      }
    }
  }

 private:
  // granted counts the items handed out from either end; front and back
  // count those taken from each end. The grant comes first, so front + back
  // <= end - begin and the two ends never meet.
  struct alignas(64) Share {
    int64_t begin = 0, end = 0;
    std::atomic<int64_t> granted{0}, front{0}, back{0};

    bool grant() {
      return granted.load(std::memory_order_relaxed) < end - begin &&
             granted.fetch_add(1, std::memory_order_relaxed) < end - begin;
    }
  };
  static_assert(std::is_trivially_destructible_v<Share>);

  Share& share(int s) { return *std::launder(reinterpret_cast<Share*>(storage_ + s * sizeof(Share))); }

  int count_;
  alignas(Share) unsigned char storage_[kMaxShares * sizeof(Share)];
};

// Calls item(i, thread) once for each i in [0, n) on a team of up to
// num_threads threads (thread: the caller's index in the team, for per-thread
// scratch), shared out by WorkShares. n <= 1 or num_threads <= 1 runs every
// item on the calling thread, in order.
template <class Item>
void for_each_item(int64_t n, int num_threads, const Item& item) {
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) item(i, 0);
    return;
  }
  WorkShares shares(n, threads);
#pragma omp parallel num_threads(threads)
  shares.take(omp_get_thread_num(), item);
}

}  // namespace llmk::kernels::cpu
