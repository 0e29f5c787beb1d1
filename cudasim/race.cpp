// Shared-memory race check.
//
// Kernel files are compiled with -fsanitize=thread, which makes the compiler
// call __tsan_readN / __tsan_writeN before every memory access. No TSan
// runtime is linked: this file defines those hooks. An access inside the
// block's shared memory (the kernel files' static storage, where static
// __shared__ variables live, or the launch's dynamic shared memory) updates a shadow entry
// per byte: the last writer and up to two readers, each with the barrier
// epoch and the warp-local time of the access. "Static shared" is all static
// storage of the kernel files, so a __device__ global written by two threads
// without a barrier is reported too, under that name.
//
// Two accesses from different threads, at least one a write, race unless a
// __syncthreads separates them (the epoch changed) or both threads are in
// one warp and a __syncwarp they both took part in separates them (a
// per-warp vector clock). Shuffles and votes order no memory: in CUDA's
// memory model only the barriers do, and compute-sanitizer's racecheck
// reports a hazard across a shuffle on a GPU as well.
//
// Global memory is bounds-checked, not race-checked: an access inside the
// simulated device's address range must lie inside one live allocation
// (memory.cpp), else the launch fails with cudaErrorIllegalAddress naming the
// kernel, the thread, the address and the allocation.
//
// Atomics (implemented outside the instrumented code, atomics.cpp) are
// bounds-checked as global accesses too, but not race-tracked. Not tracked
// either: races on global memory, and ordering through fences or atomics.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "internal.hpp"

extern "C" {
extern char cudasim_kernel_statics_begin[] __attribute__((weak));
extern char cudasim_kernel_statics_end[] __attribute__((weak));
}

namespace cudasim::detail {
namespace {

struct shadow_byte {
  std::uint32_t write_epoch = 0, write_time = 0;
  std::uint32_t read_epoch[2] = {0, 0}, read_time[2] = {0, 0};
  std::uint16_t writer = 0;
  std::uint16_t reader[2] = {0, 0};
  std::uint32_t touched_launch = 0;  // static shared: the last launch that touched this byte
};

race_mode g_mode = race_mode::fail;
bool g_in_launch = false;  // during a launch
bool g_tracking = false;   // during a launch with the race check on
std::size_t g_num_bounds_errors = 0;  // in this launch
std::uint32_t g_launch_serial = 0;
std::size_t g_static_touched = 0;  // distinct static shared bytes this launch touched
std::string g_first_bounds_error;
std::uintptr_t g_static_begin = 0, g_static_bytes = 0;
std::uintptr_t g_dynamic_begin = 0, g_dynamic_bytes = 0;
std::vector<shadow_byte> g_static_shadow, g_dynamic_shadow;

constexpr std::size_t max_kept_reports = 16;
std::size_t g_num_races = 0;
std::size_t g_num_races_at_launch = 0;
std::vector<race_report> g_reports;

// Whether the access by `self` is ordered after the access by `other` (a
// thread of the same block) that happened at `other_time` in `epoch`.
bool ordered_after(const sim_thread& self, std::uint16_t other, std::uint32_t epoch, std::uint32_t other_time) {
  if (epoch != current_block.epoch || other == self.linear) return true;
  if (other / 32 != self.warp) return false;
  return self.clock[other % 32] > other_time;
}

void report(const char* kind, const char* region, std::size_t offset, unsigned first, unsigned second) {
  ++g_num_races;
  if (g_reports.size() >= max_kept_reports) return;
  race_report r;
  r.kernel = current_block.config ? current_block.config->name : "?";
  r.block = dim3(current_block.block_idx.x, current_block.block_idx.y, current_block.block_idx.z);
  r.kind = kind;
  r.region = region;
  r.offset = offset;
  r.first_thread = first;
  r.second_thread = second;
  const auto& threads = *current_block.threads;
  auto coords = [&](unsigned t) {
    const uint3 i = threads[t].coords.thread_idx;
    return "thread " + std::to_string(t) + " (" + std::to_string(i.x) + "," + std::to_string(i.y) + "," +
           std::to_string(i.z) + ")";
  };
  std::ostringstream s;
  s << "shared-memory race in kernel '" << r.kernel << "' block (" << r.block.x << "," << r.block.y << ","
    << r.block.z << "): " << kind << " at " << region << " +" << offset << ": " << coords(first) << " then "
    << coords(second) << ", with no barrier between them";
  r.text = s.str();
  g_reports.push_back(std::move(r));
}

// kind: "read", "write" or "atomic".
void check_bounds(std::uintptr_t a, std::size_t size, const char* kind) {
  const std::string problem = describe_device_access(a, size);
  if (problem.empty()) return;
  if (g_num_bounds_errors++ > 0) return;  // the first one names the bug
  const sim_thread& self = *current_thread;
  const uint3 i = self.coords.thread_idx, b = current_block.block_idx;
  std::ostringstream s;
  s << "out-of-bounds global " << kind << " in kernel '"
    << (current_block.config ? current_block.config->name : "?") << "' block (" << b.x << "," << b.y << "," << b.z
    << ") thread " << self.linear << " (" << i.x << "," << i.y << "," << i.z << "): " << problem;
  g_first_bounds_error = s.str();
}

void track(const void* address, std::size_t size, bool is_write) {
  if (!g_in_launch || !current_thread) return;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (in_device_range(a)) {
    check_bounds(a, size, is_write ? "write" : "read");
    return;
  }
  if (!g_tracking) return;
  shadow_byte* shadow;
  const char* region;
  std::size_t offset;
  if (a - g_static_begin < g_static_bytes) {
    offset = a - g_static_begin;
    shadow = g_static_shadow.data() + offset;
    region = "static shared";
    size = std::min<std::size_t>(size, g_static_bytes - offset);
    for (std::size_t i = 0; i < size; ++i)
      if (shadow[i].touched_launch != g_launch_serial) {
        shadow[i].touched_launch = g_launch_serial;
        ++g_static_touched;
      }
  } else if (a - g_dynamic_begin < g_dynamic_bytes) {
    offset = a - g_dynamic_begin;
    shadow = g_dynamic_shadow.data() + offset;
    region = "dynamic shared";
    size = std::min<std::size_t>(size, g_dynamic_bytes - offset);
  } else {
    return;
  }
  const sim_thread& self = *current_thread;
  const std::uint32_t epoch = current_block.epoch;
  const auto me = static_cast<std::uint16_t>(self.linear);
  bool reported = false;  // one report per access, not per byte
  for (std::size_t i = 0; i < size; ++i) {
    shadow_byte& s = shadow[i];
    if (!reported && !ordered_after(self, s.writer, s.write_epoch, s.write_time)) {
      report(is_write ? "write after write" : "read after write", region, offset + i, s.writer, me);
      reported = true;
    }
    if (is_write) {
      for (int r = 0; r < 2 && !reported; ++r)
        if (!ordered_after(self, s.reader[r], s.read_epoch[r], s.read_time[r])) {
          report("write after read", region, offset + i, s.reader[r], me);
          reported = true;
        }
      s.write_epoch = epoch;
      s.write_time = self.time;
      s.writer = me;
      s.read_epoch[0] = s.read_epoch[1] = 0;
    } else {
      // Keep this reader; evict a stale slot first, else the older one.
      int slot = s.reader[0] == me && s.read_epoch[0] == epoch   ? 0
                 : s.reader[1] == me && s.read_epoch[1] == epoch ? 1
                 : s.read_epoch[0] != epoch                      ? 0
                 : s.read_epoch[1] != epoch                      ? 1
                 : (s.read_time[0] <= s.read_time[1] ? 0 : 1);
      s.reader[slot] = me;
      s.read_epoch[slot] = epoch;
      s.read_time[slot] = self.time;
    }
  }
}

}  // namespace

void race_begin_launch(const launch_config& config, void* dynamic_base, std::size_t dynamic_bytes) {
  g_num_races_at_launch = g_num_races;
  g_num_bounds_errors = 0;
  g_first_bounds_error.clear();
  ++g_launch_serial;
  g_static_touched = 0;
  g_in_launch = true;
  g_tracking = g_mode != race_mode::off;
  g_static_begin = reinterpret_cast<std::uintptr_t>(cudasim_kernel_statics_begin);
  const auto end = reinterpret_cast<std::uintptr_t>(cudasim_kernel_statics_end);
  g_static_bytes = g_static_begin && end > g_static_begin ? end - g_static_begin : 0;
  if (g_static_begin && g_static_bytes == 0) {
    static bool warned = false;
    if (!warned) std::fprintf(stderr, "cudasim: the kernel statics markers are out of order; static shared memory is not race-checked\n");
    warned = true;
  }
  g_dynamic_begin = reinterpret_cast<std::uintptr_t>(dynamic_base);
  g_dynamic_bytes = dynamic_bytes;
  if (g_tracking) {
    // Epochs only grow, so stale entries never match: no clearing needed
    // beyond the first sizing.
    if (g_static_shadow.size() < g_static_bytes) g_static_shadow.resize(g_static_bytes);
    if (g_dynamic_shadow.size() < g_dynamic_bytes) g_dynamic_shadow.resize(g_dynamic_bytes);
  }
}

void race_begin_block() {}

void check_atomic(const void* address, std::size_t size) {
  if (!g_in_launch || !current_thread) return;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  if (in_device_range(a)) check_bounds(a, size, "atomic");
}

void race_end_launch() { g_in_launch = g_tracking = false; }

std::size_t bounds_errors_in_launch() { return g_num_bounds_errors; }
std::size_t static_shared_bytes_in_launch() { return g_static_touched; }
std::string first_bounds_error_in_launch() { return g_first_bounds_error; }

std::size_t races_in_launch() { return g_num_races - g_num_races_at_launch; }

std::string first_race_text_in_launch() {
  const std::size_t first = g_num_races_at_launch;
  return first < g_reports.size() ? g_reports[first].text : "(report not kept)";
}

}  // namespace cudasim::detail

namespace cudasim {

void set_race_mode(race_mode mode) { detail::g_mode = mode; }
race_mode get_race_mode() { return detail::g_mode; }
std::size_t race_count() { return detail::g_num_races; }
std::optional<race_report> first_race() {
  if (detail::g_reports.empty()) return std::nullopt;
  return detail::g_reports.front();
}
std::vector<race_report> races() { return detail::g_reports; }
void clear_races() {
  detail::g_num_races = 0;
  detail::g_num_races_at_launch = 0;
  detail::g_reports.clear();
}

}  // namespace cudasim

// ---- the compiler's instrumentation hooks (-fsanitize=thread) ------------------

#define CUDASIM_HOOKS(N)                                                                         \
  extern "C" void __tsan_read##N(void* p) { cudasim::detail::track(p, N, false); }               \
  extern "C" void __tsan_write##N(void* p) { cudasim::detail::track(p, N, true); }               \
  extern "C" void __tsan_unaligned_read##N(void* p) { cudasim::detail::track(p, N, false); }     \
  extern "C" void __tsan_unaligned_write##N(void* p) { cudasim::detail::track(p, N, true); }     \
  extern "C" void __tsan_volatile_read##N(void* p) { cudasim::detail::track(p, N, false); }      \
  extern "C" void __tsan_volatile_write##N(void* p) { cudasim::detail::track(p, N, true); }      \
  extern "C" void __tsan_unaligned_volatile_read##N(void* p) { cudasim::detail::track(p, N, false); } \
  extern "C" void __tsan_unaligned_volatile_write##N(void* p) { cudasim::detail::track(p, N, true); }
CUDASIM_HOOKS(1)
CUDASIM_HOOKS(2)
CUDASIM_HOOKS(4)
CUDASIM_HOOKS(8)
CUDASIM_HOOKS(16)
#undef CUDASIM_HOOKS

extern "C" void __tsan_read_range(void* p, unsigned long size) { cudasim::detail::track(p, size, false); }
extern "C" void __tsan_write_range(void* p, unsigned long size) { cudasim::detail::track(p, size, true); }
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}

// Atomic hooks: the compiler routes std::atomic and static-initialisation
// guards in kernel files through these. Simulated threads never run in
// parallel, so plain operations are atomic; they are not race-tracked.
#define CUDASIM_ATOMIC_HOOKS(N, T)                                                                          \
  extern "C" T __tsan_atomic##N##_load(const volatile T* a, int) { return *a; }                              \
  extern "C" void __tsan_atomic##N##_store(volatile T* a, T v, int) { *a = v; }                              \
  extern "C" T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { T old = *a; *a = v; return old; }      \
  extern "C" T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { T old = *a; *a = old + v; return old; } \
  extern "C" T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { T old = *a; *a = old - v; return old; } \
  extern "C" T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { T old = *a; *a = old & v; return old; } \
  extern "C" T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { T old = *a; *a = old | v; return old; }  \
  extern "C" T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { T old = *a; *a = old ^ v; return old; } \
  extern "C" T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { T old = *a; *a = ~(old & v); return old; } \
  extern "C" int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {           \
    if (*a == *c) { *a = v; return 1; }                                                                      \
    *c = *a;                                                                                                 \
    return 0;                                                                                                \
  }                                                                                                          \
  extern "C" int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int mo, int fmo) {      \
    return __tsan_atomic##N##_compare_exchange_strong(a, c, v, mo, fmo);                                     \
  }                                                                                                          \
  extern "C" T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                 \
    T old = *a;                                                                                              \
    if (old == c) *a = v;                                                                                    \
    return old;                                                                                              \
  }
CUDASIM_ATOMIC_HOOKS(8, std::uint8_t)
CUDASIM_ATOMIC_HOOKS(16, std::uint16_t)
CUDASIM_ATOMIC_HOOKS(32, std::uint32_t)
CUDASIM_ATOMIC_HOOKS(64, std::uint64_t)
#undef CUDASIM_ATOMIC_HOOKS
extern "C" void __tsan_atomic_thread_fence(int) {}
extern "C" void __tsan_atomic_signal_fence(int) {}
