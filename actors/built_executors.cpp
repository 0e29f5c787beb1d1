#include "actors/built_executors.hpp"

#include "core/device_registry.hpp"

#if defined(LLMK_HAVE_CUDA) && LLMK_HAVE_CUDA
#include "core/cuda/cuda_executor.hpp"
#include "core/cuda/cuda_sampler.hpp"
#endif

namespace llmk {

void register_built_executors() {
#if defined(LLMK_HAVE_CUDA) && LLMK_HAVE_CUDA
  register_device_backend(Device::cuda,
                          DeviceBackend{&make_cuda_executor, &make_cuda_sampler, &make_cuda_shard_executor});
#endif
}

}  // namespace llmk
