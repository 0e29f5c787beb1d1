#include "kernels/cpu/stream_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#if LLMK_STREAM_MAPPINGS
#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <vector>
#endif

namespace llmk::kernels::cpu {

#if LLMK_STREAM_MAPPINGS

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kChunkBytes = size_t{32} << 20;
constexpr size_t kSmallPage = 4096;
constexpr size_t kMaxBytes = SIZE_MAX / 2;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A mapping of `bytes` (a multiple of 4 KiB) starting on a 2 MiB boundary,
// advised for huge pages. Over-maps by 2 MiB and returns the slack.
char* map_aligned(size_t bytes) {
  void* raw = ::mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(start, kHugePage);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + kHugePage;
  if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  // Advice only: without transparent huge pages the mapping keeps 4 KiB pages.
  // LLMK_HUGE_PAGES=0 asks for 4 KiB pages (to compare, or to save the
  // partly used huge page at the end of each mapping).
  static const bool huge = [] {
    const char* v = std::getenv("LLMK_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  ::madvise(reinterpret_cast<void*>(aligned), bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return reinterpret_cast<char*>(aligned);
}

struct Mapping {
  char* base = nullptr;
  size_t bytes = 0;  // mapped
  size_t used = 0;   // bump offset (chunks)
  size_t live = 0;   // blocks not yet freed
};

class StreamPool {
 public:
  void* allocate(size_t bytes) {
    if (bytes > kMaxBytes) throw std::bad_alloc();  // rounding up below must not wrap
    bytes = round_up(std::max<size_t>(bytes, 1), kStreamAlignment);
    std::lock_guard<std::mutex> lock(mutex_);
    mappings_.reserve(mappings_.size() + 1);  // before mapping: a push_back that throws would leak it
    if (bytes >= kStreamDedicatedBytes) {
      const size_t mapped = round_up(bytes, kSmallPage);
      mappings_.push_back(Mapping{map_aligned(mapped), mapped, bytes, 1});
      return mappings_.back().base;
    }
    Mapping* chunk = current_ < mappings_.size() ? &mappings_[current_] : nullptr;
    if (chunk == nullptr || chunk->bytes - chunk->used < bytes) {
      mappings_.push_back(Mapping{map_aligned(kChunkBytes), kChunkBytes, 0, 0});
      current_ = mappings_.size() - 1;
      chunk = &mappings_.back();
    }
    void* p = chunk->base + chunk->used;
    chunk->used += bytes;
    ++chunk->live;
    return p;
  }

  void release(void* p) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto* c = static_cast<const char*>(p);
    for (size_t i = 0; i < mappings_.size(); ++i) {
      Mapping& m = mappings_[i];
      if (c < m.base || c >= m.base + m.bytes) continue;
      if (--m.live == 0) {
        ::munmap(m.base, m.bytes);
        mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(i));
        if (current_ == i) current_ = SIZE_MAX;
        else if (current_ != SIZE_MAX && current_ > i) --current_;
      }
      return;
    }
  }

 private:
  std::mutex mutex_;
  std::vector<Mapping> mappings_;
  size_t current_ = SIZE_MAX;  // the chunk small blocks come from
};

StreamPool& pool() {
  static StreamPool* instance = new StreamPool;  // never destroyed: blocks may be freed by static destructors
  return *instance;
}

}  // namespace

void* stream_alloc(size_t bytes) { return pool().allocate(bytes); }

void stream_free(void* p) noexcept {
  if (p != nullptr) pool().release(p);
}

#else

void* stream_alloc(size_t bytes) {
  if (bytes > SIZE_MAX / 2) throw std::bad_alloc();
  void* p = std::aligned_alloc(kStreamAlignment, (std::max<size_t>(bytes, 1) + kStreamAlignment - 1) /
                                                     kStreamAlignment * kStreamAlignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void stream_free(void* p) noexcept { std::free(p); }

#endif

}  // namespace llmk::kernels::cpu
