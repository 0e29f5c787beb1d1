// Device memory: an address range of its own, so that every global access of
// a kernel can be bounds-checked as a GPU's memory protection would.
//
// The simulated device's memory is one large anonymous mapping reserved at
// the first cudaMalloc (MAP_NORESERVE: only the pages an allocation touches
// cost host memory). Allocations are page-aligned, each followed by at least
// one unused page, and handed out next-fit from a cursor that wraps, so a
// freed range is reused only after the rest of the range has been used once.
// An instrumented access (race.cpp's hooks) that lands inside this range must
// lie inside one live allocation: one past the end of a buffer, a read of a
// freed buffer or a stray index all name the kernel, the thread, the address
// and the allocation. Accesses outside the range (fiber stacks, host memory,
// the simulation's own state) are not device memory and are not checked.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "internal.hpp"

namespace cudasim::detail {

std::uintptr_t g_arena_begin = 0, g_arena_end = 0;

namespace {

constexpr std::size_t page_bytes = 4096;
std::map<std::uintptr_t, std::size_t> g_device_allocations;  // begin -> bytes asked for
std::uintptr_t g_cursor = 0;                                 // next-fit start
// The allocation the last checked access fell in: kernels touch the same few
// buffers over and over. Cleared when anything is freed.
std::uintptr_t g_cached_begin = 0, g_cached_end = 0;

bool reserve_arena() {
  if (g_arena_begin) return true;
  // 1 TiB of address space, less where the system refuses that much.
  for (std::size_t bytes : {std::size_t{1} << 40, std::size_t{1} << 38, std::size_t{1} << 36}) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    g_arena_begin = reinterpret_cast<std::uintptr_t>(p);
    g_arena_end = g_arena_begin + bytes;
    g_cursor = g_arena_begin;
    return true;
  }
  return false;
}

std::size_t reserved_bytes(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + page_bytes - 1) / page_bytes * page_bytes + page_bytes;
}

// The first free range of `need` bytes at or after `from`, or 0.
std::uintptr_t find_gap(std::uintptr_t from, std::uintptr_t to, std::size_t need) {
  auto it = g_device_allocations.upper_bound(from);
  if (it != g_device_allocations.begin()) {
    auto prev = std::prev(it);
    from = std::max(from, prev->first + reserved_bytes(prev->second));
  }
  for (;; ++it) {
    const std::uintptr_t limit = it == g_device_allocations.end() ? to : std::min(to, it->first);
    if (limit > from && limit - from >= need) return from;
    if (it == g_device_allocations.end() || it->first >= to) return 0;
    from = std::max(from, it->first + reserved_bytes(it->second));
  }
}

// The live allocation at or below `a` (end() if none).
std::map<std::uintptr_t, std::size_t>::const_iterator allocation_below(std::uintptr_t a) {
  auto it = g_device_allocations.upper_bound(a);
  if (it == g_device_allocations.begin()) return g_device_allocations.end();
  return std::prev(it);
}

std::string hex(std::uintptr_t a) {
  std::ostringstream s;
  s << "0x" << std::hex << a;
  return s.str();
}

}  // namespace

void* device_allocate(std::size_t bytes) {
  if (!reserve_arena()) return nullptr;
  const std::size_t need = reserved_bytes(bytes);
  std::uintptr_t at = find_gap(g_cursor, g_arena_end, need);
  if (!at) at = find_gap(g_arena_begin, g_arena_end, need);
  if (!at) return nullptr;
  g_device_allocations[at] = bytes;
  g_cursor = at + need;
  return reinterpret_cast<void*>(at);
}

bool device_free(void* p, std::size_t* bytes) {
  auto it = g_device_allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_device_allocations.end()) return false;
  *bytes = it->second;
  // Give the pages back to the host; the range reads as zeros if touched again.
  madvise(p, reserved_bytes(it->second) - page_bytes, MADV_DONTNEED);
  g_device_allocations.erase(it);
  g_cached_begin = g_cached_end = 0;
  return true;
}

bool is_device_range(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = allocation_below(a);
  if (it == g_device_allocations.end()) return false;
  return a >= it->first && a + bytes <= it->first + it->second;
}

std::string describe_device_access(std::uintptr_t a, std::size_t size) {
  if (a >= g_cached_begin && a + size <= g_cached_end) return {};
  auto it = allocation_below(a);
  if (it != g_device_allocations.end() && a + size <= it->first + it->second) {
    g_cached_begin = it->first;
    g_cached_end = it->first + it->second;
    return {};
  }
  std::ostringstream s;
  s << size << " bytes at " << hex(a) << ": ";
  if (it == g_device_allocations.end()) {
    s << "outside any device allocation (below every live allocation)";
  } else if (a < it->first + it->second) {
    s << "offset " << a - it->first << " of the " << it->second << "-byte allocation at " << hex(it->first)
      << ", running " << a + size - (it->first + it->second) << " bytes past its end";
  } else {
    s << "outside any device allocation: " << a - (it->first + it->second) << " bytes past the end of the "
      << it->second << "-byte allocation at " << hex(it->first) << " (byte offset " << a - it->first << ")";
  }
  return s.str();
}

}  // namespace cudasim::detail
