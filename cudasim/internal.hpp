// cudasim internals shared by the library's .cpp files (never included by
// kernels or tests).
#pragma once

#include <boost/context/fiber.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_api.h>

#include "cudasim.hpp"

namespace cudasim::detail {

// An error inside a kernel (barrier divergence, bad shuffle, exited lane in a
// collective); fails the launch with the message.
struct kernel_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class thread_state { runnable, at_block_barrier, at_warp_op, done };

struct sim_thread {
  boost::context::fiber fiber;  // this thread, while suspended
  boost::context::fiber sink;   // the scheduler, while this thread runs
  // The fiber's stack and the scheduler's, for AddressSanitizer's
  // annotations of the switches between them (scheduler.cpp).
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
  const void* caller_bottom = nullptr;
  std::size_t caller_size = 0;
  void* fake_stack = nullptr;  // ASan's fake stack of the fiber while it is suspended
  thread_coords coords{};
  unsigned linear = 0, warp = 0, lane = 0;
  thread_state state = thread_state::runnable;

  // Pending warp collective.
  warp_op op = warp_op::sync;
  unsigned mask = 0;
  std::uint64_t value = 0, result = 0;
  int arg = 0, width = 32;

  // Pending block barrier.
  block_op bar_op = block_op::sync;
  int bar_value = 0, bar_result = 0;

  // Happens-before within the warp (race check): `time` counts the warp
  // collectives this lane took part in; clock[j] is the latest time of lane j
  // this lane has synchronised with.
  std::uint32_t time = 1;
  std::uint32_t clock[32] = {};
};

// State of the block being simulated (one at a time, on one OS thread).
struct block_context {
  const launch_config* config = nullptr;
  uint3 block_idx{};
  std::vector<sim_thread>* threads = nullptr;
  std::uint32_t epoch = 0;  // increases at the block's start and at each __syncthreads
};

extern sim_thread* current_thread;
extern block_context current_block;

// race.cpp
void race_begin_launch(const launch_config& config, void* dynamic_base, std::size_t dynamic_bytes);
void race_end_launch();
void race_begin_block();  // after current_block is set up
// An atomic's address against the device's allocations (a failed check fails
// the launch as an out-of-bounds global access does).
void check_atomic(const void* address, std::size_t size);
std::size_t races_in_launch();
std::string first_race_text_in_launch();
// Global accesses outside the allocation they started in, in this launch.
std::size_t bounds_errors_in_launch();
std::string first_bounds_error_in_launch();
// Distinct bytes of static shared memory the launch touched (its static
// shared size as far as the simulation can see it; 0 with the race check off).
std::size_t static_shared_bytes_in_launch();

// scheduler.cpp
void run_kernel(const launch_config& config, const std::function<void()>& body);

// streams.cpp: when stream work runs (see there).
// Records `op` into the graph `stream` is capturing; false if it is not.
// `communicates`: a collective other processes take part in (the graph then
// runs at its launch; see streams.cpp).
bool capture_if_active(cudaStream_t stream, std::function<void()> op, bool communicates = false);
// Captures, queues (deferred mode) or runs `op` in `stream`'s order.
void enqueue(cudaStream_t stream, std::function<void()> op);
// A cudaMemcpyAsync whose arguments were checked: pageable ends as CUDA
// treats them, pinned ends snapshotted for the hazard check.
void enqueue_copy(void* dst, const void* src, std::size_t count, cudaStream_t stream);
void flush_stream(cudaStream_t stream);  // runs its queued work (the legacy stream: everything)
void flush_all();
// runtime.cpp: what a synchronisation returns (a failed kernel's error, sticky).
cudaError_t sticky_error();
// Whether [p, p + bytes) lies inside one pinned host allocation.
bool is_pinned_range(const void* p, std::size_t bytes);

// cublas.cpp: the GEMM behind cuBLAS and cuBLASLt, column-major,
// D = alpha op(A) op(B) + beta C, products and sums in float (C may be D).
struct gemm_args {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha, beta;
  const void* a;
  cudaDataType a_type;
  int lda;
  long long stride_a;
  const void* b;
  cudaDataType b_type;
  int ldb;
  long long stride_b;
  const void* c;
  cudaDataType c_type;
  int ldc;
  long long stride_c;
  void* d;
  cudaDataType d_type;
  int ldd;
  long long stride_d;
  int batch_count;
  // FP8 operands only: device pointers to one float each, read when the
  // product runs (as cuBLASLt reads its scale pointers); null means 1.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  // cuBLASLt's FAST compute types: A and B (F32) rounded to this format (to
  // nearest even) before the products, which stay in float.
  enum class rounding { none, tf32, f16, bf16 } input_rounding = rounding::none;
};
bool gemm_type_supported(cudaDataType t);  // F32, F16, BF16
bool gemm_fp8_type(cudaDataType t);        // E4M3, E5M2 (cuBLASLt operands A and B only)
void run_gemm(const gemm_args& g);
// memory.cpp: device allocations in an address range of their own.
// Whether [p, p + bytes) lies inside one device allocation.
bool is_device_range(const void* p, std::size_t bytes);
void* device_allocate(std::size_t bytes);         // null when the range is full or cannot be reserved
bool device_free(void* p, std::size_t* bytes);  // false: not an allocation's start
// The simulated device's address range ([0, 0) before the first cudaMalloc).
extern std::uintptr_t g_arena_begin, g_arena_end;
inline bool in_device_range(std::uintptr_t a) { return a - g_arena_begin < g_arena_end - g_arena_begin; }
// "" when [a, a + size) lies inside one live allocation, else what is wrong
// (the address, and the allocation it started in or lies past the end of).
std::string describe_device_access(std::uintptr_t a, std::size_t size);
void set_error(cudaError_t code, const std::string& detail);

}  // namespace cudasim::detail
