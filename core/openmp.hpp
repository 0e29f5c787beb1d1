// The engine's compute threads are OpenMP teams. libgomp keeps one pool of
// worker threads per thread that has started a parallel region, for as long
// as that thread lives, and counts the workers of every pool together: once
// they outnumber the CPUs, the barriers of every pool spin about a thousand
// times instead of a few hundred thousand before sleeping, and each parallel
// region then waits for a woken worker. A batch-1 decode step starts about a
// hundred regions; with the loading thread's pool left behind, the executor's
// steps took 17-39% longer (docs/PERFORMANCE.md, "Engine overheads").
#pragma once

#include <omp.h>

namespace llmk {

// Ends the calling thread's OpenMP worker pool (a thread done with parallel
// work: the one that loaded the model). Its next parallel region, if any,
// starts a new pool. No-op inside a parallel region.
inline void release_openmp_pool() { omp_pause_resource(omp_pause_soft, omp_get_initial_device()); }

}  // namespace llmk
