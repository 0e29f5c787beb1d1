// Atomics for simulated kernels. A launch's threads never run in parallel
// (fibers on one OS thread), so a read-modify-write is atomic as written.
// This file is not compiled with the race-check instrumentation, so atomics
// on shared memory are not reported as races; each address is bounds-checked
// against the device's allocations as the instrumented accesses are.
#include <algorithm>
#include <cmath>

#include "internal.hpp"

namespace {
template <class T, class F>
T read_modify_write(T* address, F f) {
  cudasim::detail::check_atomic(address, sizeof(T));
  const T old = *address;
  *address = f(old);
  return old;
}
}  // namespace

#define CUDASIM_RMW(name, T, expr) \
  T name(T* address, T value) { return read_modify_write(address, [&](T old) -> T { return expr; }); }

CUDASIM_RMW(atomicAdd, int, old + value)
CUDASIM_RMW(atomicAdd, unsigned, old + value)
CUDASIM_RMW(atomicAdd, unsigned long long, old + value)
CUDASIM_RMW(atomicAdd, float, old + value)
CUDASIM_RMW(atomicAdd, double, old + value)
CUDASIM_RMW(atomicSub, int, old - value)
CUDASIM_RMW(atomicSub, unsigned, old - value)
CUDASIM_RMW(atomicMax, int, std::max(old, value))
CUDASIM_RMW(atomicMax, unsigned, std::max(old, value))
CUDASIM_RMW(atomicMax, long long, std::max(old, value))
CUDASIM_RMW(atomicMax, unsigned long long, std::max(old, value))
CUDASIM_RMW(atomicMin, int, std::min(old, value))
CUDASIM_RMW(atomicMin, unsigned, std::min(old, value))
CUDASIM_RMW(atomicMin, long long, std::min(old, value))
CUDASIM_RMW(atomicMin, unsigned long long, std::min(old, value))
CUDASIM_RMW(atomicExch, int, value)
CUDASIM_RMW(atomicExch, unsigned, value)
CUDASIM_RMW(atomicExch, unsigned long long, value)
CUDASIM_RMW(atomicExch, float, value)
CUDASIM_RMW(atomicAnd, int, old & value)
CUDASIM_RMW(atomicAnd, unsigned, old & value)
CUDASIM_RMW(atomicOr, int, old | value)
CUDASIM_RMW(atomicOr, unsigned, old | value)
CUDASIM_RMW(atomicXor, int, old ^ value)
CUDASIM_RMW(atomicXor, unsigned, old ^ value)
#undef CUDASIM_RMW

#define CUDASIM_CAS(T)                                          \
  T atomicCAS(T* address, T compare, T value) {                 \
    cudasim::detail::check_atomic(address, sizeof(T));          \
    const T old = *address;                                     \
    if (old == compare) *address = value;                       \
    return old;                                                 \
  }
CUDASIM_CAS(int)
CUDASIM_CAS(unsigned)
CUDASIM_CAS(unsigned long long)
CUDASIM_CAS(unsigned short)
#undef CUDASIM_CAS
