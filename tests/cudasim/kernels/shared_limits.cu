// Fills a static and a dynamic shared-memory tile and sums both: the launch
// checks' kernel (static plus dynamic shared memory against the limits).
#include "cuda_compat.hpp"
#include "test_kernels.hpp"

namespace llmk::cudasim_test {
namespace {

// out: [1], the sum of 1.0f over every static and dynamic float, written by thread 0.
template <int kStaticFloats>
__global__ void shared_fill_kernel(float* __restrict__ out, int num_dynamic_floats) {
  __shared__ float tile[kStaticFloats];
  LLMK_DYNAMIC_SHARED(float, dynamic);
  for (int i = threadIdx.x; i < kStaticFloats; i += blockDim.x) tile[i] = 1.0f;
  for (int i = threadIdx.x; i < num_dynamic_floats; i += blockDim.x) dynamic[i] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int i = 0; i < kStaticFloats; ++i) sum += tile[i];
    for (int i = 0; i < num_dynamic_floats; ++i) sum += dynamic[i];
    out[0] = sum;
  }
}

template <int kStaticFloats>
cudaError_t launch_fill(float* out, std::size_t dynamic_bytes, int opt_in_bytes, cudaStream_t stream) {
  if (opt_in_bytes > 0) {
    const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(shared_fill_kernel<kStaticFloats>),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, opt_in_bytes);
    if (e != cudaSuccess) return e;
  }
  LLMK_LAUNCH(1, 128, dynamic_bytes, stream, shared_fill_kernel<kStaticFloats>)(out, static_cast<int>(dynamic_bytes / 4));
  return cudaGetLastError();
}

}  // namespace

cudaError_t shared_fill(float* out, int static_kib, std::size_t dynamic_bytes, int opt_in_bytes, cudaStream_t stream) {
  switch (static_kib) {
    case 8: return launch_fill<8 * 256>(out, dynamic_bytes, opt_in_bytes, stream);
    case 40: return launch_fill<40 * 256>(out, dynamic_bytes, opt_in_bytes, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace llmk::cudasim_test
