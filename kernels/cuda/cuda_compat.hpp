// The one include a kernel file needs to build both ways:
//   nvcc (sm_80, sm_90a)      -> the real toolkit headers and <<<>>> launches
//   g++ -x c++ (CPU tests)    -> cudasim/cudasim.hpp (the simulation library, llmk_cudasim),
//                                which runs the same source on fibers
// Kernel files use LLMK_LAUNCH for every launch and LLMK_DYNAMIC_SHARED for
// dynamic shared memory; everything else is ordinary CUDA.
#pragma once

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

// LLMK_LAUNCH(grid, block, dynamic_smem_bytes, stream, kernel)(args...);
// The kernel comes last so that a template-id with commas needs no parentheses.
#define LLMK_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>

// Declares `T* name` pointing at the block's dynamic shared memory
// (the launch's dynamic_smem_bytes, 16-byte aligned).
#define LLMK_DYNAMIC_SHARED(T, name)                                  \
  extern __shared__ __align__(16) unsigned char llmk_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(llmk_dynamic_smem_)

#define LLMK_CUDASIM 0

#else

#include "cudasim/cudasim.hpp"

#endif
