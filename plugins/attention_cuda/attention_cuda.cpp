// attention.cuda: paged causal GQA attention on a CUDA device, correct
// before fast (the kernels of kernels/cuda/attention_paged.hpp).
//
// plan() checks the step's host metadata once (attention_common::check_step)
// and keeps the device copies for the step's runs; run() enqueues the K/V
// write and the attention of one layer on the caller's stream: no
// allocation, no synchronization and no host reads of device memory, so a
// step can be captured into a CUDA graph. Prefill chunks and decodes share
// one kernel (one block per query token and head). No workspace.
//
// The same source builds against the CUDA runtime (the shipped plugin) and
// against the CUDA simulation (the tests' copy, tests/cudasim_plugins).
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/attention_paged.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/attention_common/step_checks.hpp"

namespace llmk::attention_cuda {

namespace {

using plugin::Error;

bool served_dtype(uint32_t dtype) {
  return dtype == LLMK_DTYPE_F32 || dtype == LLMK_DTYPE_F16 || dtype == LLMK_DTYPE_BF16;
}

uint64_t dtype_bytes(uint32_t dtype) { return dtype == LLMK_DTYPE_F32 ? 4 : 2; }

cuda::PagedAttentionShape shape_of(const llmk_attention_desc& d) {
  cuda::PagedAttentionShape s;
  s.num_heads = static_cast<int32_t>(d.num_heads);
  s.num_kv_heads = static_cast<int32_t>(d.num_kv_heads);
  s.head_dim = static_cast<int32_t>(d.head_dim);
  s.scale = d.scale;
  s.sliding_window = static_cast<int32_t>(d.sliding_window);
  s.activation_dtype = static_cast<llmk_dtype>(d.activation_dtype);
  s.kv_dtype = static_cast<llmk_dtype>(d.kv_dtype);
  return s;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(LLMK_ERR_INTERNAL, std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                                       cudaGetErrorString(status) + ")");
}

}  // namespace

class AttentionCuda {
 public:
  static constexpr const char* kName = "attention.cuda";
  static constexpr const char* kVersion = "0.1.0";
  static constexpr const char* kDescription =
      "CUDA paged causal GQA attention (online softmax, one block per query token and head), F32/F16/BF16 KV";
  static constexpr const char* kCapabilities =
      R"({"kv_dtypes":["f32","f16","bf16"],"devices":["cuda"],"activation_dtypes":["f32","f16","bf16"],"paged":true,"gqa":true,"sliding_window":true})";

  static bool supports(const llmk_attention_desc& d, std::string& why) {
    if (d.device != LLMK_DEVICE_CUDA) {
      why = "this plugin runs on CUDA, the desc names " + plugin::device_text(d.device);
      return false;
    }
    if (!served_dtype(d.activation_dtype)) {
      why = "activation dtype " + std::to_string(d.activation_dtype) + " is not f32, f16 or bf16";
      return false;
    }
    if (!served_dtype(d.kv_dtype)) {
      why = "kv_dtype " + std::to_string(d.kv_dtype) + " is not served: only f32, f16 and bf16";
      return false;
    }
    if (d.num_heads == 0 || d.num_kv_heads == 0 || d.num_heads % d.num_kv_heads != 0) {
      why = "num_kv_heads (" + std::to_string(d.num_kv_heads) + ") must be positive and divide num_heads (" +
            std::to_string(d.num_heads) + ")";
      return false;
    }
    if (cuda::check_paged_attention_shape(shape_of(d)) != cudaSuccess) {
      why = "head_dim " + std::to_string(d.head_dim) + " is outside 1.." +
            std::to_string(cuda::kAttentionMaxHeadDim) + " or the scale is not usable";
      return false;
    }
    return true;
  }

  explicit AttentionCuda(const llmk_attention_desc& d) : desc_(d), shape_(shape_of(d)) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, why);
  }

  void kv_layout(llmk_kv_layout& layout) const {
    layout.kind = LLMK_KV_LAYOUT_STANDARD;
    layout.alignment = 256;  // cudaMalloc's
    layout.k_bytes_per_slot = layout.v_bytes_per_slot =
        static_cast<uint64_t>(desc_.num_kv_heads) * desc_.head_dim * dtype_bytes(desc_.kv_dtype);
    layout.k_scale_bytes_per_slot = layout.v_scale_bytes_per_slot = 0;
  }

  size_t plan(const llmk_attention_step& step) {
    attention_common::check_step(step);
    step_.num_tokens = static_cast<int32_t>(step.num_tokens);
    step_.num_seqs = static_cast<int32_t>(step.num_seqs);
    step_.max_blocks_per_seq = static_cast<int32_t>(step.max_blocks_per_seq);
    step_.block_size = static_cast<int32_t>(step.block_size);
    step_.query_start = step.device_query_start;
    step_.context_lens = step.device_context_lens;
    step_.slot_mapping = step.device_slot_mapping;
    step_.block_tables = step.device_block_tables;
    num_slots_ = step.num_slots;
    planned_ = true;
    return 0;
  }

  void run(const llmk_attention_layer& layer, void* /*workspace*/, size_t /*workspace_size*/, void* stream) {
    if (!planned_) throw Error(LLMK_ERR_INVALID_ARGUMENT, "run() before any plan()");
    if (layer.kv.num_slots != num_slots_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the layer's cache has " + std::to_string(layer.kv.num_slots) +
                                                 " slots, the step was planned for " + std::to_string(num_slots_));
    if (step_.num_tokens == 0) return;
    const cuda::PagedKvCache cache{layer.kv.k, layer.kv.v, layer.kv.k_scale, layer.kv.v_scale};
    check_cuda(cuda::attention_paged_run(shape_, step_, layer.q, layer.k, layer.v, cache, layer.out,
                                         static_cast<cudaStream_t>(stream)),
               "attention.cuda launch");
  }

 private:
  llmk_attention_desc desc_;
  cuda::PagedAttentionShape shape_;
  cuda::PagedAttentionStep step_;
  uint32_t num_slots_ = 0;
  bool planned_ = false;
};

}  // namespace llmk::attention_cuda

LLMK_EXPORT_ATTENTION_PLUGIN(llmk::attention_cuda::AttentionCuda)
