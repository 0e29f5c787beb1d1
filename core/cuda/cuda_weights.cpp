#include "core/cuda/cuda_weights.hpp"

#include <memory>
#include <vector>

namespace llmk {

namespace {

// The kernels number their dtypes as the engine does (kernels/cuda/dtype.hpp).
static_assert(static_cast<uint32_t>(cuda::DType::f32) == static_cast<uint32_t>(DType::f32) &&
              static_cast<uint32_t>(cuda::DType::f16) == static_cast<uint32_t>(DType::f16) &&
              static_cast<uint32_t>(cuda::DType::bf16) == static_cast<uint32_t>(DType::bf16) &&
              static_cast<uint32_t>(cuda::DType::i8) == static_cast<uint32_t>(DType::i8));

void* allocate_device_workspace(size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) cuda_failed("CUDA executor", status, "allocating the linear layers' workspace");
  return p;
}

void release_device_workspace(void* p) noexcept { cudaFree(p); }

}  // namespace

size_t CudaWeights::bytes() const { return host.bytes() - host.embed->nbytes() + embed.bytes(); }

Error with_cuda_plugin_hint(const Error& e, const char* key, const char* plugins) {
  if (e.code() != ErrorCode::plugin) return e;
  return Error(ErrorCode::plugin,
               std::string(e.what()) + " (executor.device=cuda needs a CUDA plugin in " + key + ": " + plugins + ")");
}

CudaWeights load_cuda_weights(const Checkpoint& checkpoint, PluginRegistry& plugins, const EngineConfig& cfg,
                              const ModelRuntime& runtime, const ModelShard* shard) {
  LinearPlacement placement;
  placement.device = LLMK_DEVICE_CUDA;
  placement.workspace = std::make_shared<LinearWorkspace>(&allocate_device_workspace, &release_device_workspace);
  CudaWeights w;
  try {
    w.host = load_weights(checkpoint, plugins, cfg, runtime, placement, shard);
  } catch (const Error& e) {
    throw with_cuda_plugin_hint(e, "plugins.linear",
                                "linear.cublas, linear.cuda_int8, linear.cuda_int4 or linear.cuda_fp8");
  }
  const TensorView& embed = *w.host.embed;
  if (is_ggml_dtype(embed.dtype)) {
    // ggml blocks (a GGUF file's quantized table): decoded once, uploaded as F32.
    std::vector<float> table(static_cast<size_t>(embed.numel()));
    convert_to_f32(embed.dtype, embed.data, table.data(), table.size());
    w.embed = upload(table.data(), table.size() * sizeof(float), "the embedding table");
    w.embed_dtype = static_cast<cuda::DType>(DType::f32);
  } else {
    w.embed = upload(embed.data, embed.nbytes(), "the embedding table");
    w.embed_dtype = static_cast<cuda::DType>(embed.dtype);
  }
  const int32_t num_layers = checkpoint.config().num_layers;
  w.layers.resize(static_cast<size_t>(num_layers));
  for (int32_t i = 0; i < num_layers; ++i) {
    const LayerWeights& l = w.host.layers[i];
    w.layers[i].input_norm = upload(l.input_norm, "a norm weight");
    w.layers[i].post_norm = upload(l.post_norm, "a norm weight");
    w.layers[i].qkv_bias = upload(l.qkv_bias, "a q/k/v bias");
  }
  w.final_norm = upload(w.host.final_norm, "the final norm weight");
  return w;
}

}  // namespace llmk
