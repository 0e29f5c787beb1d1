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
  double memory_utilization = 0.9;    // fraction of device memory the engine may use
};

struct EstimateResult {
  double num_params = 0;
  double weight_bytes = 0;              // whole model
  double weight_bytes_per_device = 0;
  double kv_bytes_per_token = 0;        // 2 x layers x kv_heads x head_dim x bytes, whole model
  // The executor's logits: two f32 buffers of batch_size x vocab (the next
  // step's forward writes one while the sampler reads the other).
  double logits_bytes = 0;
  double kv_capacity_tokens = 0;        // across the tensor-parallel group
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
  double tp_comm_time_per_step_s = 0;   // all-reduce time per decode step (0 at tp = 1)
  double request_latency_s = 0;         // prefill + output_len decode steps
};

// Parameters of a Llama: embeddings, lm_head (unless tied), attention,
// gated MLP and norms.
double llama_num_params(const ModelConfig& m);
double decode_flops_per_token(const ModelConfig& m, double context_len);

EstimateResult estimate(const EstimateInput& in);

}  // namespace llmk
