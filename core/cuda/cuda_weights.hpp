// The CUDA executor's weights: the linear layers from the configured linear
// plugin on the device (they own their device memory), the norms and q/k/v
// biases uploaded in f32, the embedding table in the checkpoint's dtype.
#pragma once

#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cuda/device_memory.hpp"
#include "core/error.hpp"
#include "core/model_runtime.hpp"
#include "core/model_weights.hpp"
#include "core/plugin_loader.hpp"
#include "kernels/cuda/dtype.hpp"

namespace llmk {

struct CudaLayerWeights {
  cuda::DeviceBuffer input_norm, post_norm;  // [hidden] f32
  cuda::DeviceBuffer qkv_bias;               // [qkv_dim] f32, empty without biases
};

struct CudaWeights {
  ModelWeights host;  // the linear layers (device); the norms' host copies
  cuda::DeviceBuffer embed;  // [vocab, hidden] in embed_dtype
  cuda::DType embed_dtype = cuda::DType::f32;
  std::vector<CudaLayerWeights> layers;
  cuda::DeviceBuffer final_norm;  // [hidden] f32

  // Bytes of the weights on the device (the checkpoint's embedding table
  // counted as uploaded).
  size_t bytes() const;
};

// Builds the linear layers on the device and uploads the rest. Throws what
// load_weights throws; a plugin that refused the device names the CUDA
// plugins to configure instead. With a shard, only its share (load_weights):
// the embedding table is then its vocabulary rows.
CudaWeights load_cuda_weights(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
                              const ModelRuntime& runtime, const ModelShard* shard = nullptr);

// A plugin error with what to configure instead (the defaults name the CPU
// plugins): `key` is the config key, `plugins` the CUDA plugins for it.
Error with_cuda_plugin_hint(const Error& e, const char* key, const char* plugins);

}  // namespace llmk
