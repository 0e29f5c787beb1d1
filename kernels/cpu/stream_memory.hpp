// Memory for what a forward streams from DRAM every step: the weights of the
// linear layers and the KV cache.
//
// A batch-1 decode step reads every weight once. With 4 KiB pages that is a
// TLB miss every 4 KiB, and the page walks of a stream whose page tables were
// themselves evicted by the stream cost DRAM round trips that the hardware
// prefetchers, which stop at page boundaries, cannot hide. On Linux this
// memory therefore comes from 2 MiB-aligned mappings advised MADV_HUGEPAGE:
// where transparent huge pages are enabled ("always" or "madvise", the
// common defaults) the kernel backs them with 2 MiB pages. Measured on an AMD
// EPYC (Zen 3, 2 threads), int4 one-row passes over 125 MB of matrices in
// turn: 5-10% faster than the same matrices on 4 KiB pages (docs/PERFORMANCE.md).
//
// Blocks below kStreamDedicatedBytes are carved from shared 32 MiB chunks
// (most matrices are a few hundred KiB: a mapping each would round each up to
// a huge page); a chunk is unmapped when its last block is freed. Larger
// blocks get a mapping of their own. Pages are committed on first touch.
// Thread-safe. LLMK_HUGE_PAGES=0 in the environment advises 4 KiB pages
// instead. Elsewhere than Linux, and in AddressSanitizer builds (so that it
// still sees every overrun of a weight or KV buffer): std::aligned_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
#define LLMK_STREAM_MAPPINGS 1
#else
#define LLMK_STREAM_MAPPINGS 0
#endif

namespace llmk::kernels::cpu {

// Whether stream memory comes from huge-page-advised mappings in this build.
constexpr bool kStreamMappings = LLMK_STREAM_MAPPINGS != 0;

constexpr size_t kStreamAlignment = 64;
constexpr size_t kStreamDedicatedBytes = size_t{8} << 20;

// Uninitialized, kStreamAlignment-aligned; throws std::bad_alloc (also for
// sizes past SIZE_MAX / 2, such as a corrupt shape's product).
void* stream_alloc(size_t bytes);
// p from stream_alloc, or nullptr.
void stream_free(void* p) noexcept;

struct StreamFree {
  void operator()(void* p) const noexcept { stream_free(p); }
};

// count elements of uninitialized stream memory.
template <class T>
class StreamArray {
 public:
  StreamArray() = default;
  explicit StreamArray(size_t count) : data_(static_cast<T*>(stream_alloc(bytes_for(count)))), count_(count) {}
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  static size_t bytes_for(size_t count) {
    if (count > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    return count * sizeof(T);
  }

  std::unique_ptr<T[], StreamFree> data_;
  size_t count_ = 0;
};

}  // namespace llmk::kernels::cpu
