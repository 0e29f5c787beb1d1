// Measured limits of the machine the engine runs on, for rooflines and for
// benchmarks that report figures as fractions of a limit measured in the
// same run.
#pragma once

#include <cstddef>

namespace llmk {

// Memory bandwidth of a large multi-threaded copy, counting bytes read plus
// bytes written, best of `repeats`. bytes: size of each buffer.
double measure_memory_bandwidth(size_t bytes = size_t{512} << 20, int repeats = 5, int num_threads = 0);

// FP32 GEMM rate (FLOP/s) of an n x n x n product through the BLAS, best of `repeats`.
double measure_gemm_flops(int n = 1024, int repeats = 5, int num_threads = 0);

// Physical memory of this machine in bytes.
double physical_memory_bytes();

}  // namespace llmk
