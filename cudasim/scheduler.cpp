// Runs a launch: blocks in a seeded random order, each block's threads as
// fibers, scheduled round by round in a seeded random order until every
// thread has finished. Barriers and warp collectives are where a fiber yields.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <sstream>

#include "internal.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif
#if defined(CUDASIM_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cudasim::detail {

thread_coords* current_coords = nullptr;
sim_thread* current_thread = nullptr;
block_context current_block;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 engine = [] {
    const char* env = std::getenv("LLMK_CUDASIM_SEED");
    return std::mt19937_64(env ? std::strtoull(env, nullptr, 10) : 1);
  }();
  return engine;
}
std::uint64_t g_seed = [] {
  const char* env = std::getenv("LLMK_CUDASIM_SEED");
  return env ? std::strtoull(env, nullptr, 10) : std::uint64_t{1};
}();

std::vector<unsigned char> g_dynamic_smem;  // the launch's dynamic shared memory

// Fiber stacks, reused across blocks: mmap'd, with a guard page below.
class stack_pool {
 public:
  static constexpr std::size_t stack_bytes = 256 * 1024;
  static constexpr std::size_t guard_bytes = 4096;

  boost::context::stack_context allocate() {
    void* base;
    if (!free_.empty()) {
      base = free_.back();
      free_.pop_back();
    } else {
      base = mmap(nullptr, stack_bytes + guard_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      mprotect(base, guard_bytes, PROT_NONE);
    }
    boost::context::stack_context sc;
    sc.size = stack_bytes;
    sc.sp = static_cast<char*>(base) + guard_bytes + stack_bytes;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
    free_.push_back(static_cast<char*>(sc.sp) - stack_bytes - guard_bytes);
  }

 private:
  std::vector<void*> free_;
};

stack_pool& pool() {
  static stack_pool p;
  return p;
}

// Allocator handle passed to each fiber (the pool outlives them all); it
// notes the stack in the thread, for the switch annotations below.
struct pooled_stack {
  sim_thread* owner;
  boost::context::stack_context allocate() {
    boost::context::stack_context sc = pool().allocate();
    owner->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
    owner->stack_size = sc.size;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept { pool().deallocate(sc); }
};

// AddressSanitizer keeps one stack per OS thread; each switch between the
// scheduler's stack and a fiber's is announced before it (start: the stack
// to be entered; a null fake-stack slot when the fiber leaves for good) and
// completed after it (finish: the stack left, to switch back to later).
// Without them it takes a fiber's frames for the scheduler's, and reports
// the unwinding of an aborted kernel's fibers as stack misuse.
void asan_start_switch(void** fake_stack_slot, const void* bottom, std::size_t size) {
#if defined(CUDASIM_ASAN)
  __sanitizer_start_switch_fiber(fake_stack_slot, bottom, size);
#else
  (void)fake_stack_slot, (void)bottom, (void)size;
#endif
}
void asan_finish_switch(void* fake_stack, const void** bottom_old, std::size_t* size_old) {
#if defined(CUDASIM_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// The scheduler's side of a switch into thread t, until t yields, ends or
// has unwound (a fiber destroyed while suspended unwinds its stack first).
template <class Switch>
void switch_into(sim_thread& t, Switch&& into) {
  void* fake_stack = nullptr;
  asan_start_switch(&fake_stack, t.stack_bottom, t.stack_size);
  into();
  asan_finish_switch(fake_stack, nullptr, nullptr);
}

void yield_to_scheduler() {
  sim_thread* self = current_thread;
  {
    // Finished on the way back in, also when that way is the forced unwind
    // of a fiber destroyed while suspended.
    struct back_in {
      sim_thread* self;
      ~back_in() { asan_finish_switch(self->fake_stack, &self->caller_bottom, &self->caller_size); }
    } guard{self};
    asan_start_switch(&self->fake_stack, self->caller_bottom, self->caller_size);
    self->sink = std::move(self->sink).resume();
  }
  current_thread = self;
  current_coords = &self->coords;
}

// Destroys the block's fibers; those suspended mid-kernel unwind their stacks.
void unwind_fibers(std::vector<sim_thread>& threads) {
  for (sim_thread& t : threads)
    if (t.fiber) switch_into(t, [&t] { t.fiber = boost::context::fiber{}; });
  threads.clear();
}

std::string describe(const sim_thread& t) {
  std::ostringstream s;
  s << "thread " << t.linear << " (" << t.coords.thread_idx.x << "," << t.coords.thread_idx.y << ","
    << t.coords.thread_idx.z << ")";
  return s.str();
}

// Completes warp collectives whose lanes have all arrived; returns whether any did.
bool complete_warp_ops(std::vector<sim_thread>& threads) {
  bool progressed = false;
  const unsigned num_threads = static_cast<unsigned>(threads.size());
  for (unsigned base = 0; base < num_threads; base += 32) {
    const unsigned num_lanes = std::min(32u, num_threads - base);
    const unsigned existing = num_lanes == 32 ? 0xffffffffu : ((1u << num_lanes) - 1);
    for (unsigned lane = 0; lane < num_lanes; ++lane) {
      sim_thread& leader = threads[base + lane];
      if (leader.state != thread_state::at_warp_op) continue;
      const unsigned mask = leader.mask & existing;
      if (!(mask >> lane & 1u))
        throw kernel_error(describe(leader) + " called a warp collective with a mask that leaves itself out");
      bool all_arrived = true;
      for (unsigned l = 0; l < num_lanes && all_arrived; ++l) {
        if (!(mask >> l & 1u)) continue;
        const sim_thread& t = threads[base + l];
        if (t.state == thread_state::done)
          throw kernel_error(describe(t) + " exited before the warp collective its lanes wait in (mask " +
                             std::to_string(mask) + ")");
        if (t.state != thread_state::at_warp_op) all_arrived = false;
      }
      if (!all_arrived) continue;
      // Every lane of the mask is waiting: check they agree, then exchange.
      std::uint32_t merged[32] = {};
      for (unsigned l = 0; l < num_lanes; ++l) {
        if (!(mask >> l & 1u)) continue;
        sim_thread& t = threads[base + l];
        if (t.op != leader.op || (t.mask & existing) != mask)
          throw kernel_error(describe(t) + " and " + describe(leader) +
                             " reached different warp collectives (operation or mask differ)");
        t.clock[l] = ++t.time;
        for (int j = 0; j < 32; ++j) merged[j] = std::max(merged[j], t.clock[j]);
      }
      std::uint64_t ballot = 0;
      for (unsigned l = 0; l < num_lanes; ++l)
        if ((mask >> l & 1u) && threads[base + l].value != 0) ballot |= 1ull << l;
      // Only __syncwarp orders memory between the lanes (CUDA's memory
      // model; compute-sanitizer's racecheck agrees): a shuffle or a vote
      // exchanges values, and an access before it still races with another
      // lane's access after it.
      const bool orders_memory = leader.op == warp_op::sync;
      for (unsigned l = 0; l < num_lanes; ++l) {
        if (!(mask >> l & 1u)) continue;
        sim_thread& t = threads[base + l];
        if (orders_memory) std::copy(std::begin(merged), std::end(merged), std::begin(t.clock));
        const int width = t.width;
        if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
          throw kernel_error(describe(t) + " used a shuffle width that is not a power of two up to 32");
        const int group = static_cast<int>(l) & ~(width - 1);
        int src = static_cast<int>(l);
        switch (t.op) {
          case warp_op::sync:
            break;
          case warp_op::shfl_idx:
            src = group + (t.arg & (width - 1));
            break;
          case warp_op::shfl_up:
            if (static_cast<int>(l) - t.arg >= group) src = static_cast<int>(l) - t.arg;
            break;
          case warp_op::shfl_down:
            if (static_cast<int>(l) + t.arg < group + width) src = static_cast<int>(l) + t.arg;
            break;
          case warp_op::shfl_xor:
            if ((static_cast<int>(l) ^ t.arg) < group + width) src = static_cast<int>(l) ^ t.arg;
            break;
          case warp_op::ballot:
            t.result = ballot;
            break;
          case warp_op::any:
            t.result = ballot != 0;
            break;
          case warp_op::all:
            t.result = ballot == mask;
            break;
        }
        if (t.op == warp_op::shfl_idx || t.op == warp_op::shfl_up || t.op == warp_op::shfl_down ||
            t.op == warp_op::shfl_xor) {
          if (src < 0 || src >= static_cast<int>(num_lanes) || !(mask >> src & 1u))
            throw kernel_error(describe(t) + " shuffled from lane " + std::to_string(src) +
                               ", which is not in the mask (undefined on a GPU)");
          t.result = threads[base + src].value;
        }
      }
      for (unsigned l = 0; l < num_lanes; ++l)
        if (mask >> l & 1u) threads[base + l].state = thread_state::runnable;
      progressed = true;
    }
  }
  return progressed;
}

bool complete_block_barrier(std::vector<sim_thread>& threads) {
  bool any_waiting = false;
  for (const sim_thread& t : threads) {
    if (t.state == thread_state::at_block_barrier) any_waiting = true;
    else if (t.state != thread_state::done) return false;
  }
  if (!any_waiting) return false;
  int count = 0, num_waiting = 0;
  block_op op = block_op::sync;
  for (const sim_thread& t : threads) {
    if (t.state != thread_state::at_block_barrier) continue;
    if (num_waiting > 0 && t.bar_op != op)
      throw kernel_error("threads reached different block barriers (__syncthreads variants differ)");
    op = t.bar_op;
    ++num_waiting;
    count += t.bar_value != 0;
  }
  const int result = op == block_op::count ? count
                     : op == block_op::all ? (count == num_waiting)
                     : op == block_op::any ? (count > 0)
                                           : 0;
  for (sim_thread& t : threads)
    if (t.state == thread_state::at_block_barrier) {
      t.bar_result = result;
      t.state = thread_state::runnable;
    }
  ++current_block.epoch;
  return true;
}

std::string describe_deadlock(const std::vector<sim_thread>& threads) {
  std::ostringstream s;
  s << "deadlock: no thread can proceed (";
  int shown = 0;
  for (const sim_thread& t : threads) {
    if (t.state == thread_state::done || shown >= 4) continue;
    s << (shown++ ? "; " : "") << describe(t)
      << (t.state == thread_state::at_block_barrier ? " waits at __syncthreads" : " waits in a warp collective");
  }
  s << "). A barrier inside divergent code, or a warp collective some lanes never reach?";
  return s.str();
}

void run_block(const launch_config& config, const std::function<void()>& body, uint3 block_idx,
               std::vector<sim_thread>& threads) {
  const dim3 bd = config.block;
  const unsigned num_threads = bd.x * bd.y * bd.z;
  threads.clear();
  threads.resize(num_threads);
  current_block.block_idx = block_idx;
  current_block.threads = &threads;
  ++current_block.epoch;
  race_begin_block();
  std::exception_ptr error;
  for (unsigned i = 0; i < num_threads; ++i) {
    sim_thread& t = threads[i];
    t.linear = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.clock[t.lane] = t.time;
    t.coords = {{i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)}, block_idx, bd, config.grid};
  }
  // A thread's fiber is made when it first runs, so that every fiber
  // destroyed unfinished has run (and its switches are annotated).
  auto make_fiber = [&body, &error](sim_thread& t) {
    t.fiber = boost::context::fiber(std::allocator_arg, pooled_stack{&t}, [&t, &body, &error](boost::context::fiber&& sink) {
      asan_finish_switch(nullptr, &t.caller_bottom, &t.caller_size);
      t.sink = std::move(sink);
      current_thread = &t;
      current_coords = &t.coords;
      try {
        body();
      } catch (const boost::context::detail::forced_unwind&) {
        asan_start_switch(nullptr, t.caller_bottom, t.caller_size);  // leaves for good
        throw;
      } catch (...) {
        if (!error) error = std::current_exception();
      }
      t.state = thread_state::done;
      asan_start_switch(nullptr, t.caller_bottom, t.caller_size);
      return std::move(t.sink);
    });
  };
  std::vector<unsigned> order;
  order.reserve(num_threads);
  try {
    for (;;) {
      order.clear();
      for (unsigned i = 0; i < num_threads; ++i)
        if (threads[i].state == thread_state::runnable) order.push_back(i);
      if (order.empty()) {
        if (std::all_of(threads.begin(), threads.end(), [](const sim_thread& t) { return t.state == thread_state::done; }))
          break;
        if (complete_warp_ops(threads) || complete_block_barrier(threads)) continue;
        throw kernel_error(describe_deadlock(threads));
      }
      std::shuffle(order.begin(), order.end(), rng());
      for (unsigned i : order) {
        sim_thread& t = threads[i];
        if (!t.fiber) make_fiber(t);  // runnable without a fiber: not started yet
        current_thread = &t;
        current_coords = &t.coords;
        switch_into(t, [&t] { t.fiber = std::move(t.fiber).resume(); });
        current_thread = nullptr;
        current_coords = nullptr;
        if (error) std::rethrow_exception(error);
      }
    }
  } catch (...) {
    current_thread = nullptr;
    current_coords = nullptr;
    unwind_fibers(threads);
    throw;
  }
  threads.clear();
}

}  // namespace

void* dynamic_shared_base() { return g_dynamic_smem.data(); }

unsigned lane_id() { return current_thread->lane; }

std::uint64_t warp_collective(warp_op op, unsigned mask, std::uint64_t value, int arg, int width) {
  sim_thread* t = current_thread;
  if (!t) throw kernel_error("a warp collective was called outside a kernel");
  t->op = op;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  t->state = thread_state::at_warp_op;
  yield_to_scheduler();
  return current_thread->result;
}

void kernel_fail(const std::string& what) {
  if (!current_thread) throw kernel_error(what);
  const uint3 t = current_thread->coords.thread_idx, b = current_block.block_idx;
  throw kernel_error(what + " (thread (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," +
                     std::to_string(t.z) + ") of block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                     std::to_string(b.z) + "))");
}

int block_barrier(block_op op, int predicate) {
  sim_thread* t = current_thread;
  if (!t) throw kernel_error("__syncthreads was called outside a kernel");
  t->bar_op = op;
  t->bar_value = predicate;
  t->state = thread_state::at_block_barrier;
  yield_to_scheduler();
  return current_thread->bar_result;
}

void run_kernel(const launch_config& config, const std::function<void()>& body) {
  static std::mutex one_launch_at_a_time;
  std::lock_guard lock(one_launch_at_a_time);
  const dim3 g = config.grid;
  const std::uint64_t num_blocks = std::uint64_t{g.x} * g.y * g.z;
  std::vector<std::uint64_t> block_order(num_blocks);
  for (std::uint64_t i = 0; i < num_blocks; ++i) block_order[i] = i;
  std::shuffle(block_order.begin(), block_order.end(), rng());

  // Real dynamic shared memory starts uninitialised: poison it.
  g_dynamic_smem.assign(config.dynamic_smem_bytes + 16, 0xff);
  current_block.config = &config;
  race_begin_launch(config, g_dynamic_smem.data(), config.dynamic_smem_bytes);
  std::vector<sim_thread> threads;
  try {
    for (std::uint64_t b : block_order) {
      const uint3 idx{static_cast<unsigned>(b % g.x), static_cast<unsigned>((b / g.x) % g.y),
                      static_cast<unsigned>(b / (std::uint64_t{g.x} * g.y))};
      std::fill(g_dynamic_smem.begin(), g_dynamic_smem.end(), 0xff);
      run_block(config, body, idx, threads);
    }
  } catch (...) {
    race_end_launch();
    current_block.config = nullptr;
    throw;
  }
  race_end_launch();
  current_block.config = nullptr;
}

}  // namespace cudasim::detail

namespace cudasim {

void set_seed(std::uint64_t seed) {
  detail::g_seed = seed;
  detail::rng().seed(seed);
}
std::uint64_t seed() { return detail::g_seed; }

}  // namespace cudasim

unsigned __activemask() {
  using namespace cudasim::detail;
  if (!current_thread) return 0;
  const auto& threads = *current_block.threads;
  unsigned mask = 0;
  const unsigned base = current_thread->warp * 32;
  for (unsigned l = 0; l < 32 && base + l < threads.size(); ++l)
    if (threads[base + l].state != thread_state::done) mask |= 1u << l;
  return mask;
}
