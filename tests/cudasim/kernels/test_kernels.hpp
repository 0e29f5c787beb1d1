// Host launchers of the test kernels in this folder. Each .cu file builds with
// nvcc (the sm_80 / sm_90a compile check) and as C++ against cudasim (the
// tests). Pointers are device pointers; shapes are written next to them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace llmk::cudasim_test {

// reduce.cu: out[r] = sum of x[r, :], one block per row.
// x: [num_rows, n] row-major; out: [num_rows]. num_threads a multiple of 32, <= 1024.
void row_sum_shuffle(const float* x, float* out, int num_rows, int n, int num_threads, cudaStream_t stream);
// The same with a shared-memory tree (blockDim a power of two), with the
// barrier between the tree's steps, or (for the race check) without it.
void row_sum_tree(const float* x, float* out, int num_rows, int n, int num_threads, cudaStream_t stream);
void row_sum_tree_missing_sync(const float* x, float* out, int num_rows, int n, int num_threads, cudaStream_t stream);
// One warp: lane 1 reads a shared word, the pair shuffles, lane 0 writes the
// word; a __syncwarp before the write or none (a race: shuffles order no
// memory). out: [1], 3 either way when the race does no harm.
void pair_handoff(float* out, bool with_syncwarp, cudaStream_t stream);

// matmul_tiled.cu: c = a * b, 16x16 shared-memory tiles.
// a: [m, k], b: [k, n], c: [m, n], all row-major float.
void matmul_tiled(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream);
// Leaves out the barrier after the tile's products: the next tile's loads
// overwrite what other threads still read.
void matmul_tiled_missing_sync(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream);

// histogram.cu: counts[v] += 1 for each value (values in [0, num_bins)),
// shared-memory per-block histograms merged with global atomics.
// values: [n]; counts: [num_bins], zeroed by the caller; num_bins <= 1024.
void histogram(const int* values, unsigned* counts, int n, int num_bins, cudaStream_t stream);
// max_out[0] = max(values), via atomicMax; sum_out[0] += sum(x) via float atomicAdd;
// claims[i] = the thread that won slot i via atomicCAS / atomicExch.
void atomic_misc(const int* values, const float* x, int n, int* max_out, float* sum_out, int* claims, int num_slots,
                 cudaStream_t stream);

// scan.cu: inclusive prefix sum of each row, one block per row (n <= 1024),
// warp scans with __shfl_up_sync and the per-warp totals in dynamic shared memory.
// x: [num_rows, n]; y: [num_rows, n].
void inclusive_scan_rows(const int* x, int* y, int num_rows, int n, cudaStream_t stream);

// warp_ops.cu: per lane of each warp, out[t] = a record of shuffles and votes
// (see warp_ops.cu for the exact formula each column holds).
// values: [num_threads]; out: [num_threads, 8].
void warp_ops(const int* values, int* out, int num_threads, cudaStream_t stream);

// wmma_gemm.cu: c = a * b with tensor-core tiles, one warp per 16x16 tile of c.
// a: [m, k] row-major, b: [k, n] column-major, c: [m, n] row-major float;
// m, n, k multiples of 16.
void wmma_gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream);
// d = a * a for one 16x16 tile, loaded and stored by WMMA straight from global
// memory: a: [16, lda] __half row-major, d: [16, ldd] float. One warp.
void wmma_square_tile(const __half* a, unsigned lda, float* d, unsigned ldd, cudaStream_t stream);
void wmma_gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int m, int n, int k,
                    cudaStream_t stream);

// axpy.cu: y = alpha * x + y, one thread per element (graph-capture tests).
void axpy(float alpha, const float* x, float* y, int n, cudaStream_t stream);

// gather.cu: out[i] = in[index[i]] for i < num_threads. No bounds checks of
// its own: the bounds-check tests hand it indices past `in` or a thread
// count past `out`.
void gather(const float* in, const int* index, float* out, int num_threads, cudaStream_t stream);

// shared_limits.cu: one block of 128 threads fills a static shared tile of
// static_kib KiB (8 or 40) and `dynamic_bytes` of dynamic shared memory with
// 1.0f, and thread 0 writes their sum to out[0]. opt_in_bytes > 0 first
// raises the kernel's dynamic limit (cudaFuncSetAttribute). Returns the
// launch's status (its execution errors come at the synchronisation).
cudaError_t shared_fill(float* out, int static_kib, std::size_t dynamic_bytes, int opt_in_bytes, cudaStream_t stream);

}  // namespace llmk::cudasim_test
