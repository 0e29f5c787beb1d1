// Roofline estimates for choosing hardware: how much memory a model and its
// KV cache take, and the time bounds of prefill and decode on a device.
//
// A step can go no faster than the larger of (bytes it must move / memory
// bandwidth) and (FLOPs it must do / peak FLOP rate). Decode at small batch
// is bound by reading the weights; prefill by arithmetic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/model_config.hpp"

namespace llmk {

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;         // device memory
  double bandwidth_bytes_s = 0;    // memory bandwidth
  double peak_flops_16 = 0;        // dense BF16/FP16 tensor FLOP/s
  double peak_flops_8 = 0;         // dense FP8/INT8 (0: not supported, use 16-bit rate)
  double peak_flops_32 = 0;        // FP32 (CPU GEMM, or CUDA cores)
  double link_bytes_s = 0;         // per-device interconnect for tensor parallelism
  std::string source;              // "datasheet" or "measured"
};

// The built-in table (datasheet figures, dense, no sparsity).
const std::vector<DeviceSpec>& builtin_devices();
std::optional<DeviceSpec> find_device(const std::string& name);  // case-insensitive, e.g. "h100-sxm"

struct EstimateInput {
  ModelConfig model;
  DeviceSpec device;
  double weight_bytes_per_param = 2;  // 4 f32, 2 bf16/f16, 1 int8/fp8, 0.5 int4
  double kv_bytes_per_element = 2;    // 4 f32, 2 f16, 1 int8
  int batch_size = 1;
  int prompt_len = 512;
  int output_len = 128;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;          // stages of contiguous layers (core/parallel.hpp)
  double activation_bytes = 2;        // per value all-reduced or sent between stages (4: the CPU executor's f32)
  double memory_utilization = 0.9;    // fraction of device memory the engine may use
};

// One device (rank) of a tensor_parallel x pipeline_parallel job: the share
// core/parallel.hpp gives it, in the estimate's dtypes.
struct DeviceShare {
  int rank = 0, stage = 0, tensor_rank = 0;
  int first_layer = 0, last_layer = 0;  // [first, last)
  double num_params = 0;
  double weight_bytes = 0;
  double kv_bytes_per_token = 0;        // its layers' share of each token's K and V
  double kv_capacity_tokens = 0;        // what its memory left after weights and logits holds
};

struct EstimateResult {
  double num_params = 0;
  double weight_bytes = 0;              // whole model
  double weight_bytes_per_device = 0;   // the largest device's
  double kv_bytes_per_token = 0;        // 2 x layers x kv_heads x head_dim x bytes, whole model
  double kv_bytes_per_token_per_device = 0;  // the largest device's (KV heads replicated past their count)
  std::vector<DeviceShare> devices;     // rank by rank (one at degree 1)
  // The executor's logits: two f32 buffers of batch_size x vocab (the next
  // step's forward writes one while the sampler reads the other).
  double logits_bytes = 0;
  double kv_capacity_tokens = 0;        // of the job: the device that fills first decides
  double max_concurrent_seqs = 0;       // of prompt_len + output_len tokens
  double ridge_flops_per_byte = 0;      // peak / bandwidth
  double prefill_flops = 0;             // whole batch of prompts
  double prefill_bytes = 0;
  double prefill_time_s = 0;            // bound
  double decode_flops = 0;              // one step, whole batch, at mean context
  double decode_bytes = 0;
  double decode_step_time_s = 0;        // bound
  bool decode_memory_bound = true;
  double decode_tokens_per_s = 0;       // batch / step time
  // Per decode step: the tensor groups' all-reduces (two per layer and the
  // embedding's) and gather of the logits; the stages' sends of the hidden
  // states and of the logits back to rank 0. 0 at degree 1.
  double tp_comm_bytes_per_step = 0;    // each device sends, ring algorithms
  double tp_comm_time_per_step_s = 0;
  double pp_comm_bytes_per_step = 0;    // over all stage boundaries
  double pp_comm_time_per_step_s = 0;
  double request_latency_s = 0;         // prefill + output_len decode steps
};

// Parameters of a Llama: embeddings, lm_head (unless tied), attention,
// gated MLP and norms.
double llama_num_params(const ModelConfig& m);
double decode_flops_per_token(const ModelConfig& m, double context_len);

// Throws Error(invalid_config) for a degree the engine refuses for the model
// (core/parallel.hpp: tensor_shard, stage_layers), with the engine's message.
EstimateResult estimate(const EstimateInput& in);

}  // namespace llmk
