// attention.cuda: paged causal GQA attention on a CUDA device.
//
// One step mixes prefill chunks and decodes; plan() looks at the step's host
// metadata once and routes each kind to its kernel:
//   - decodes (one new query token): attention_decode, the query heads of a
//     KV head in one block, the context split across blocks when the
//     longest decode needs it (the split count sizes the workspace, and so
//     keys the executor's CUDA graphs), then a merge;
//   - prefill chunks: attention_flash on tensor cores (WMMA, operands in
//     BF16 or F16, f32 accumulation), or attention_paged in f32, one block
//     per query token and head. Option "prefill": "flash", "paged", or
//     "auto" (the default): flash where the cache already holds 16-bit
//     values (F16, BF16), so that only q and the softmax weights are
//     rounded; paged for F32 and I8 caches, whose accuracy gates are f32's.
//     The capabilities declare what that rounding may cost the output
//     ("kv_rounding_ulp": 8 units of the cache type's roundoff; the
//     conformance grid measured up to 3.4), which the conformance suite
//     holds the plugin to.
// Both read the cache after kv_cache_write has stored the step's rows.
// Attention sinks (API 3.2, StreamingLLM): every kernel scores the first
// sink_tokens cache positions with the layer's q_sink rows, the other keys
// with q, in one softmax (a decode's sinks lead its split order; the prefill
// kernels take the sinks in a pass of their own first).
// Token trees (API 3.3, llmk_attention_step.tree_parents): a speculating
// decode's newest token and its draft tree are a chunk of several rows, so
// they go to the prefill kernel (flash or paged), which masks each row to the
// cached context, its ancestors and itself and counts the window from its
// depth (kernels/cuda/attention_tree.hpp); a decode's one row is a tree's
// root alone and needs no mask.
// run() only enqueues work on the caller's stream: no allocation, no
// synchronization and no host reads of device memory, so a step can be
// captured into a CUDA graph; workspace_bound() says the most workspace any
// step within the desc's limits plans, so the host can allocate it once.
//
// The same source builds against the CUDA runtime (the shipped plugin) and
// against the CUDA simulation (the tests' copy, tests/cudasim_plugins).
//
// This plugin reads llmk_attention_step.tree_parents, so it claims 3.3.
#define LLMK_ATTENTION_API_BUILD_MINOR 3u
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/attention_flash.hpp"
#include "kernels/cuda/attention_paged.hpp"
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/attention_common/step_checks.hpp"

namespace llmk::attention_cuda {

namespace {

using plugin::Error;

bool served_dtype(uint32_t dtype) {
  return dtype == LLMK_DTYPE_F32 || dtype == LLMK_DTYPE_F16 || dtype == LLMK_DTYPE_BF16;
}

uint64_t dtype_bytes(uint32_t dtype) { return dtype == LLMK_DTYPE_F32 ? 4 : dtype == LLMK_DTYPE_I8 ? 1 : 2; }

// The kernels number their dtypes as the ABI does (kernels/cuda/dtype.hpp).
static_assert(static_cast<uint32_t>(cuda::DType::f32) == LLMK_DTYPE_F32 &&
              static_cast<uint32_t>(cuda::DType::f16) == LLMK_DTYPE_F16 &&
              static_cast<uint32_t>(cuda::DType::bf16) == LLMK_DTYPE_BF16 &&
              static_cast<uint32_t>(cuda::DType::i8) == LLMK_DTYPE_I8);

cuda::PagedAttentionShape shape_of(const llmk_attention_desc& d) {
  cuda::PagedAttentionShape s;
  s.num_heads = static_cast<int32_t>(d.num_heads);
  s.num_kv_heads = static_cast<int32_t>(d.num_kv_heads);
  s.head_dim = static_cast<int32_t>(d.head_dim);
  s.scale = d.scale;
  s.sliding_window = static_cast<int32_t>(d.sliding_window);
  s.activation_dtype = static_cast<cuda::DType>(d.activation_dtype);
  s.kv_dtype = static_cast<cuda::DType>(d.kv_dtype);
  s.kv_group_size = d.kv_dtype == LLMK_DTYPE_I8 ? static_cast<int32_t>(d.kv_group_size) : 0;
  s.sink_tokens = d.struct_size >= offsetof(llmk_attention_desc, sink_tokens) + sizeof(uint32_t)
                      ? static_cast<int32_t>(d.sink_tokens)
                      : 0;
  return s;
}

enum class Prefill { automatic, flash, paged };

// The plugin's options: {"prefill": "auto" | "flash" | "paged"}.
Prefill parse_prefill(const char* options) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(options != nullptr && *options != 0 ? options : "{}");
  } catch (const nlohmann::json::exception& e) {
    throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string("attention.cuda options are not JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(LLMK_ERR_INVALID_ARGUMENT, "attention.cuda options must be a JSON object");
  Prefill prefill = Prefill::automatic;
  for (const auto& [key, value] : j.items()) {
    if (key != "prefill")
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "attention.cuda has no option '" + key + "' (known: prefill)");
    const std::string v = value.is_string() ? value.get<std::string>() : std::string();
    if (v == "auto") prefill = Prefill::automatic;
    else if (v == "flash") prefill = Prefill::flash;
    else if (v == "paged") prefill = Prefill::paged;
    else throw Error(LLMK_ERR_INVALID_ARGUMENT, "attention.cuda option prefill must be \"auto\", \"flash\" or \"paged\"");
  }
  return prefill;
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
  static constexpr const char* kVersion = "0.2.0";
  static constexpr const char* kDescription =
      "CUDA paged causal GQA attention: split-K decode attention grouped by KV head, flash prefill on tensor cores (WMMA) or in f32; F32/F16/BF16 or I8 group-quantized KV";
  static constexpr const char* kCapabilities =
      R"({"kv_dtypes":["f32","f16","bf16","i8"],"devices":["cuda"],"activation_dtypes":["f32","f16","bf16"],"paged":true,"gqa":true,"sliding_window":true,"attention_sinks":true,"token_trees":true,"options":["prefill"],"kv_rounding_ulp":{"f16":8,"bf16":8}})";

  static bool supports(const llmk_attention_desc& d, std::string& why) {
    if (d.device != LLMK_DEVICE_CUDA) {
      why = "this plugin runs on CUDA, the desc names " + plugin::device_text(d.device);
      return false;
    }
    if (!served_dtype(d.activation_dtype)) {
      why = "activation dtype " + std::to_string(d.activation_dtype) + " is not f32, f16 or bf16";
      return false;
    }
    if (!served_dtype(d.kv_dtype) && d.kv_dtype != LLMK_DTYPE_I8) {
      why = "kv_dtype " + std::to_string(d.kv_dtype) + " is not served: only f32, f16, bf16 and i8";
      return false;
    }
    if (d.kv_dtype == LLMK_DTYPE_I8 && (d.kv_group_size == 0 || d.head_dim % d.kv_group_size != 0)) {
      why = "i8 KV needs kv_group_size dividing head_dim (" + std::to_string(d.head_dim) + "), got " +
            std::to_string(d.kv_group_size);
      return false;
    }
    if (d.num_heads == 0 || d.num_kv_heads == 0 || d.num_heads % d.num_kv_heads != 0) {
      why = "num_kv_heads (" + std::to_string(d.num_kv_heads) + ") must be positive and divide num_heads (" +
            std::to_string(d.num_heads) + ")";
      return false;
    }
    try {
      parse_prefill(d.options);
    } catch (const Error& e) {
      why = e.what();
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
    const Prefill prefill = parse_prefill(d.options);
    const bool sixteen_bit_cache = d.kv_dtype == LLMK_DTYPE_F16 || d.kv_dtype == LLMK_DTYPE_BF16;
    flash_prefill_ = cuda::check_flash_attention_shape(shape_) == cudaSuccess &&
                     (prefill == Prefill::flash || (prefill == Prefill::automatic && sixteen_bit_cache));
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      num_sms_ = 0;  // the split chooser's default
  }

  void kv_layout(llmk_kv_layout& layout) const {
    layout.kind = LLMK_KV_LAYOUT_STANDARD;
    layout.alignment = 256;  // cudaMalloc's
    layout.k_bytes_per_slot = layout.v_bytes_per_slot =
        static_cast<uint64_t>(desc_.num_kv_heads) * desc_.head_dim * dtype_bytes(desc_.kv_dtype);
    layout.k_scale_bytes_per_slot = layout.v_scale_bytes_per_slot =
        desc_.kv_dtype == LLMK_DTYPE_I8
            ? static_cast<uint64_t>(desc_.num_kv_heads) * (desc_.head_dim / desc_.kv_group_size) * sizeof(float)
            : 0;
  }

  size_t plan(const llmk_attention_step& step) {
    attention_common::check_step(step);
    attention_common::check_tree_parents(step);
    const int32_t* parents = attention_common::tree_parents(step);
    if (parents != nullptr && step.device_tree_parents == nullptr)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the step has tree_parents but no device_tree_parents");
    step_.tree_parents = parents == nullptr ? nullptr : step.device_tree_parents;
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

    // Which kernels the step needs, and the decodes' split.
    int32_t num_decodes = 0, longest_decode = 0;
    has_prefill_ = false;
    for (uint32_t s = 0; s < step.num_seqs; ++s) {
      const int32_t query_len = step.query_start[s + 1] - step.query_start[s];
      if (query_len == 1) {
        ++num_decodes;
        longest_decode =
            std::max(longest_decode, cuda::attention_decode_visible_keys(shape_, step.context_lens[s]));
      } else if (query_len > 1) {
        has_prefill_ = true;
      }
    }
    num_splits_ = num_decodes == 0 ? 0
                                   : cuda::attention_decode_num_splits(longest_decode, num_decodes,
                                                                       shape_.num_kv_heads, num_sms_);
    workspace_bytes_ =
        num_splits_ == 0 ? 0 : cuda::attention_decode_workspace_bytes(shape_, step_.num_seqs, num_splits_);
    return workspace_bytes_;
  }

  // The most plan() asks for on a step within the desc: the workspace holds
  // num_seqs x the decodes' split count, and the split count grows with the
  // longest visible context (max_context, or the window plus the sinks) and
  // shrinks as decodes are added. With d decodes a step of max_tokens tokens
  // holds at most (max_tokens + d) / 2 sequences (every other one takes two
  // rows or more), and at most max_seqs.
  size_t workspace_bound() const {
    const int32_t max_tokens = static_cast<int32_t>(std::max<uint32_t>(desc_.max_tokens, 1));
    const int32_t max_seqs = desc_.max_seqs > 0 ? static_cast<int32_t>(desc_.max_seqs) : max_tokens;
    const int32_t longest = cuda::attention_decode_visible_keys(shape_, static_cast<int32_t>(desc_.max_context));
    size_t most = 0;
    for (int32_t d = 1; d <= std::min(max_seqs, max_tokens); ++d) {
      const int32_t num_seqs = std::min(max_seqs, (max_tokens + d) / 2);
      const int32_t num_splits = cuda::attention_decode_num_splits(longest, d, shape_.num_kv_heads, num_sms_);
      most = std::max(most, cuda::attention_decode_workspace_bytes(shape_, num_seqs, num_splits));
    }
    return most;
  }

  void run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* stream) {
    if (!planned_) throw Error(LLMK_ERR_INVALID_ARGUMENT, "run() before any plan()");
    if (layer.kv.num_slots != num_slots_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the layer's cache has " + std::to_string(layer.kv.num_slots) +
                                                 " slots, the step was planned for " + std::to_string(num_slots_));
    if (workspace_size < workspace_bytes_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "the workspace has " + std::to_string(workspace_size) +
                                                 " bytes, the step's plan needs " + std::to_string(workspace_bytes_));
    if (step_.num_tokens == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    const void* q_sink =
        layer.struct_size >= offsetof(llmk_attention_layer, q_sink) + sizeof(void*) ? layer.q_sink : nullptr;
    const cuda::PagedKvCache cache{layer.kv.k, layer.kv.v, layer.kv.k_scale, layer.kv.v_scale};
    check_cuda(cuda::kv_cache_write(shape_, step_, layer.k, layer.v, cache, s), "attention.cuda K/V write");
    if (has_prefill_ && flash_prefill_)
      check_cuda(cuda::attention_flash(shape_, step_, layer.q, cache, layer.out, s, /*min_query_len=*/2, q_sink),
                 "attention.cuda flash prefill attention");
    else if (has_prefill_)
      check_cuda(cuda::attention_paged(shape_, step_, layer.q, cache, layer.out, s, /*min_query_len=*/2, q_sink),
                 "attention.cuda prefill attention");
    if (num_splits_ > 0)
      check_cuda(cuda::attention_decode(shape_, step_, layer.q, cache, layer.out, workspace, workspace_size,
                                        num_splits_, s, q_sink),
                 "attention.cuda decode attention");
  }

 private:
  llmk_attention_desc desc_;
  cuda::PagedAttentionShape shape_;
  cuda::PagedAttentionStep step_;
  uint32_t num_slots_ = 0;
  bool planned_ = false;
  bool flash_prefill_ = false;    // prefill chunks on tensor cores (attention_flash)
  bool has_prefill_ = false;      // the planned step has sequences with more than one new row
  int32_t num_splits_ = 0;        // the decodes' context split; 0: no decodes
  size_t workspace_bytes_ = 0;
  int num_sms_ = 0;
};

}  // namespace llmk::attention_cuda

LLMK_EXPORT_ATTENTION_PLUGIN(llmk::attention_cuda::AttentionCuda)
