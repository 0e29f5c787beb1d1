// cudasim: runs CUDA kernels written in ordinary CUDA syntax on the CPU, for
// tests. Kernel files include "cuda_compat.hpp" (kernels/cuda/), which selects this header when
// the compiler is not nvcc.
//
// Model: a launch runs its blocks one after another (in a seeded random
// order); a block runs one Boost.Context fiber per thread on the calling OS
// thread. Threads run until they reach a barrier (__syncthreads) or a warp
// collective (__syncwarp, shuffles, votes, WMMA), in a seeded random order per
// round, so a missing barrier shows up as a different result per seed and,
// for shared memory, as a race report (kernel files are compiled with
// -fsanitize=thread, whose memory-access hooks this library implements; see
// race.cpp). Stream work runs in stream order when the host waits for it (or
// when issued: set_execution_mode).
//
// The toolkit's own headers provide the types (dim3, cudaError_t, __half,
// __nv_bfloat16, cuBLAS enums); this library implements the functions with
// the toolkit's signatures, so the same caller compiles against either.
// Never linked into release binaries.
#pragma once

#if defined(__CUDACC__)
#error "cudasim.hpp is the CPU simulation; nvcc builds use the real toolkit"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define LLMK_CUDASIM 1

// ---- control API for tests --------------------------------------------------

namespace cudasim {

// Seed of the thread and block orders. Default: $LLMK_CUDASIM_SEED, else 1.
void set_seed(std::uint64_t seed);
std::uint64_t seed();

enum class race_mode {
  off,     // no shared-memory tracking
  report,  // record races, launches still succeed
  fail,    // record races, and the launch fails (cudaErrorLaunchFailure) (default)
};
void set_race_mode(race_mode mode);
race_mode get_race_mode();

// One shared-memory race: two threads of a block touched the same byte with
// no barrier ordering them (read after write, write after write, write after
// read). Threads are linear indices within the block.
struct race_report {
  std::string kernel;
  dim3 block;
  std::string kind;        // "read after write", "write after write", "write after read"
  std::string region;      // "static shared" or "dynamic shared"
  std::size_t offset = 0;  // byte offset within the region
  unsigned first_thread = 0;   // the earlier access
  unsigned second_thread = 0;  // the access that found the race
  std::string text;        // one line naming all of the above
};
std::size_t race_count();  // racy accesses since the last clear_races()
std::optional<race_report> first_race();
std::vector<race_report> races();  // the first few, in order
void clear_races();

// When stream work runs: deferred (default; $LLMK_CUDASIM_EXECUTION=eager
// changes it) queues each stream's work until the host waits for it, and
// reports host writes to pinned memory a queued copy still uses; eager runs
// everything when issued. Switching runs what is queued.
enum class execution_mode { eager, deferred };
void set_execution_mode(execution_mode mode);
execution_mode get_execution_mode();
// Host/device hazards found (pinned memory rewritten under a queued copy):
// each also fails the synchronisation that ran the copy.
std::size_t hazard_count();
std::vector<std::string> hazards();  // the first few, each one line
void clear_hazards();

// Details of the last failed launch or runtime call ("" if none).
std::string last_error_detail();

// Simulated device memory size reported by cudaMemGetInfo and enforced by
// cudaMalloc (default 80 GiB; allocations are host memory, so keep tests small).
void set_device_memory_bytes(std::size_t total_bytes);

// Compute capability the device reports (cudaGetDeviceProperties,
// cudaDeviceGetAttribute); default 9.0, an H100. Tests of code that refuses
// older devices lower it and restore it.
void set_compute_capability(int major, int minor);

// Number of kernel launches executed (graph replays included).
std::uint64_t num_launches();

}  // namespace cudasim

// ---- kernel-side language -----------------------------------------------------

namespace cudasim::detail {

struct thread_coords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// The running simulated thread's coordinates; null outside a launch.
extern thread_coords* current_coords;

void* dynamic_shared_base();

struct launch_config {
  const char* name;
  const void* func;  // the kernel's address (cudaFuncSetAttribute key)
  dim3 grid;
  dim3 block;
  std::size_t dynamic_smem_bytes;
  cudaStream_t stream;
};
// Runs (or, during stream capture, records) one launch of `body`.
void launch(const launch_config& config, std::function<void()> body);

// Warp collectives: every lane in `mask` must reach one with the same kind.
enum class warp_op : int { sync, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all };
std::uint64_t warp_collective(warp_op op, unsigned mask, std::uint64_t value, int arg, int width);
unsigned lane_id();

enum class block_op : int { sync, count, all, any };
int block_barrier(block_op op, int predicate);

// Fails the running launch with `what` (cudaErrorLaunchFailure, the message
// prefixed with the kernel's name): a rule the hardware enforces was broken.
[[noreturn]] void kernel_fail(const std::string& what);

}  // namespace cudasim::detail

// Static shared memory: a __shared__ variable is a function-local static
// (blocks run one at a time, so it is per block). The kernel files' static
// storage lies between two marker objects linked around them
// (statics_begin.cpp / statics_end.cpp), which is how the race check knows
// it. (A section attribute would be simpler, but g++ drops it on statics of
// function templates.) Static shared memory is not poisoned between blocks.
#undef __shared__
#define __shared__ static

// A launch bound is ptxas's register budget; the simulation has none to fit
// (a launch above 1024 threads fails here as on every device).
#define __launch_bounds__(...)

#define threadIdx (::cudasim::detail::current_coords->thread_idx)
#define blockIdx (::cudasim::detail::current_coords->block_idx)
#define blockDim (::cudasim::detail::current_coords->block_dim)
#define gridDim (::cudasim::detail::current_coords->grid_dim)
constexpr int warpSize = 32;

#define LLMK_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::cudasim::detail::dynamic_shared_base())

namespace cudasim {

template <class... Params>
struct kernel_launcher {
  void (*kernel)(Params...);
  detail::launch_config config;

  // Arguments are converted to the kernel's parameter types and copied, as a
  // real launch copies them into the parameter buffer.
  template <class... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<Params>...> bound(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
    auto* k = kernel;
    detail::launch(config, [k, bound]() { std::apply(k, bound); });
  }
};

template <class... Params>
kernel_launcher<Params...> make_launcher(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block,
                                         std::size_t smem, cudaStream_t stream) {
  return {kernel, {name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream}};
}

}  // namespace cudasim

#define LLMK_LAUNCH(grid, block, smem, stream, ...) \
  ::cudasim::make_launcher(__VA_ARGS__, #__VA_ARGS__, grid, block, smem, stream)

// ---- barriers and warp collectives --------------------------------------------

inline void __syncthreads() { ::cudasim::detail::block_barrier(::cudasim::detail::block_op::sync, 0); }
inline int __syncthreads_count(int p) { return ::cudasim::detail::block_barrier(::cudasim::detail::block_op::count, p); }
inline int __syncthreads_and(int p) { return ::cudasim::detail::block_barrier(::cudasim::detail::block_op::all, p); }
inline int __syncthreads_or(int p) { return ::cudasim::detail::block_barrier(::cudasim::detail::block_op::any, p); }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::cudasim::detail::warp_collective(::cudasim::detail::warp_op::sync, mask, 0, 0, 32);
}

namespace cudasim::detail {
template <class T>
T shuffle(warp_op op, unsigned mask, T value, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_collective(op, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace cudasim::detail

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return ::cudasim::detail::shuffle(::cudasim::detail::warp_op::shfl_idx, mask, var, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::cudasim::detail::shuffle(::cudasim::detail::warp_op::shfl_up, mask, var, static_cast<int>(delta), width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::cudasim::detail::shuffle(::cudasim::detail::warp_op::shfl_down, mask, var, static_cast<int>(delta), width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ::cudasim::detail::shuffle(::cudasim::detail::warp_op::shfl_xor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(
      ::cudasim::detail::warp_collective(::cudasim::detail::warp_op::ballot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(::cudasim::detail::warp_collective(::cudasim::detail::warp_op::any, mask, predicate != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(::cudasim::detail::warp_collective(::cudasim::detail::warp_op::all, mask, predicate != 0, 0, 32));
}
unsigned __activemask();

// Memory fences order nothing extra here: threads of a launch never run in
// parallel.
inline void __threadfence() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// ---- atomics -------------------------------------------------------------------
// Implemented in atomics.cpp, outside the instrumented kernel code, so that
// atomics on shared memory are not reported as races.
int atomicAdd(int* address, int value);
unsigned atomicAdd(unsigned* address, unsigned value);
unsigned long long atomicAdd(unsigned long long* address, unsigned long long value);
float atomicAdd(float* address, float value);
double atomicAdd(double* address, double value);
int atomicSub(int* address, int value);
unsigned atomicSub(unsigned* address, unsigned value);
int atomicMax(int* address, int value);
unsigned atomicMax(unsigned* address, unsigned value);
long long atomicMax(long long* address, long long value);
unsigned long long atomicMax(unsigned long long* address, unsigned long long value);
int atomicMin(int* address, int value);
unsigned atomicMin(unsigned* address, unsigned value);
long long atomicMin(long long* address, long long value);
unsigned long long atomicMin(unsigned long long* address, unsigned long long value);
int atomicExch(int* address, int value);
unsigned atomicExch(unsigned* address, unsigned value);
unsigned long long atomicExch(unsigned long long* address, unsigned long long value);
float atomicExch(float* address, float value);
int atomicCAS(int* address, int compare, int value);
unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value);
unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long value);
unsigned short atomicCAS(unsigned short* address, unsigned short compare, unsigned short value);
int atomicAnd(int* address, int value);
unsigned atomicAnd(unsigned* address, unsigned value);
int atomicOr(int* address, int value);
unsigned atomicOr(unsigned* address, unsigned value);
int atomicXor(int* address, int value);
unsigned atomicXor(unsigned* address, unsigned value);

// ---- intrinsics ----------------------------------------------------------------
// Fast-math intrinsics compute the exact function: tolerances in tests must
// cover the GPU's approximations, which are looser.
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
// CUDA's global min / max overloads.
#define CUDASIM_MIN_MAX(T)                            \
  inline T min(T a, T b) { return b < a ? b : a; }    \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDASIM_MIN_MAX(int)
CUDASIM_MIN_MAX(unsigned)
CUDASIM_MIN_MAX(long long)
CUDASIM_MIN_MAX(unsigned long long)
CUDASIM_MIN_MAX(float)
CUDASIM_MIN_MAX(double)
#undef CUDASIM_MIN_MAX
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
// Four-way byte dot product plus an accumulator (sm_61+): the bytes of a and b
// as signed (int overload) or unsigned (unsigned overload) 8-bit integers.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<std::int8_t>(a >> (8 * i))) * static_cast<std::int8_t>(b >> (8 * i));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
  return c;
}
template <class T>
T __ldg(const T* p) {
  return *p;
}

#include "wmma.hpp"
