#include "core/estimate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/parallel.hpp"
#include "core/shard_footprint.hpp"

namespace llmk {
namespace {

constexpr double GB = 1e9;
constexpr double TB = 1e12;
constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

const std::vector<DeviceSpec>& builtin_devices() {
  // Dense tensor-core rates (no 2:4 sparsity) and memory bandwidth from the
  // vendors' datasheets; link = what one GPU sends each way: half the
  // datasheet's bidirectional NVLink figure (900 GB/s on an H100 SXM: 450
  // each way), or PCIe's one direction (Gen4 x16: 32 GB/s) where there is
  // no NVLink. The communication times divide bytes sent per device by it.
  static const std::vector<DeviceSpec> devices{
      {"a100-40gb", 40 * GiB, 1.555 * TB, 312 * TB, 624 * TB, 19.5 * TB, 300 * GB, "datasheet"},
      {"a100-80gb", 80 * GiB, 2.039 * TB, 312 * TB, 624 * TB, 19.5 * TB, 300 * GB, "datasheet"},
      {"h100-sxm", 80 * GiB, 3.35 * TB, 989 * TB, 1979 * TB, 67 * TB, 450 * GB, "datasheet"},
      {"h100-pcie", 80 * GiB, 2.0 * TB, 756 * TB, 1513 * TB, 51 * TB, 300 * GB, "datasheet"},
      {"h200", 141 * GB, 4.8 * TB, 989 * TB, 1979 * TB, 67 * TB, 450 * GB, "datasheet"},
      {"l40s", 48 * GiB, 0.864 * TB, 362 * TB, 733 * TB, 91.6 * TB, 32 * GB, "datasheet"},
      {"rtx-4090", 24 * GiB, 1.008 * TB, 165 * TB, 330 * TB, 82.6 * TB, 32 * GB, "datasheet"},
      {"a10g", 24 * GiB, 0.6 * TB, 125 * TB, 250 * TB, 31.2 * TB, 32 * GB, "datasheet"},
  };
  return devices;
}

std::optional<DeviceSpec> find_device(const std::string& name) {
  std::string key = lower(name);
  std::replace(key.begin(), key.end(), '_', '-');
  for (const auto& d : builtin_devices()) {
    if (d.name == key) return d;
  }
  return std::nullopt;
}

double llama_num_params(const ModelConfig& m) {
  const double h = m.hidden_size;
  const double q = static_cast<double>(m.num_heads) * m.head_dim;
  const double kv = static_cast<double>(m.num_kv_heads) * m.head_dim;
  const double per_layer = h * q          // q_proj
                           + 2 * h * kv   // k_proj, v_proj
                           + q * h        // o_proj
                           + 3 * h * m.intermediate_size  // gate, up, down
                           + 2 * h;       // two RMSNorm weights
  const double embed = static_cast<double>(m.vocab_size) * h;
  return m.num_layers * per_layer + embed * (m.tie_word_embeddings ? 1 : 2) + h;
}

double decode_flops_per_token(const ModelConfig& m, double context_len) {
  // 2 FLOPs per weight touched by the token (embedding lookup is free), plus
  // attention: QK^T and PV over the context, 2 x 2 x heads x head_dim each.
  const double lookup = static_cast<double>(m.vocab_size) * m.hidden_size;
  const double matmul = 2 * (llama_num_params(m) - (m.tie_word_embeddings ? 0 : lookup));
  const double attention = 4.0 * m.num_layers * m.num_heads * m.head_dim * context_len;
  return matmul + attention;
}

namespace {

// Each rank's share (core/parallel.hpp's split, which throws for a degree the
// engine refuses), in the estimate's bytes per parameter and per KV value.
std::vector<DeviceShare> device_shares(const EstimateInput& in, int tp, int pp) {
  ModelConfig shapes = in.model;
  shapes.dtype = DType::f32;  // only the shapes count here; the bytes come from the input
  const auto tensors = dummy_tensors(shapes);
  std::vector<DeviceShare> out;
  for (int rank = 0; rank < tp * pp; ++rank) {
    const ModelShard shard = model_shard(shapes, tp, pp, rank);
    const ModelConfig local = local_model_config(shapes, shard);
    DeviceShare d;
    d.rank = rank;
    d.stage = shard.stage;
    d.tensor_rank = shard.tensor.rank;
    d.first_layer = shard.layers.first;
    d.last_layer = shard.layers.last;
    d.num_params = static_cast<double>(shard_weights(shapes, shard, tensors).num_params);
    d.weight_bytes = d.num_params * in.weight_bytes_per_param;
    d.kv_bytes_per_token = 2.0 * local.num_layers * local.num_kv_heads * local.head_dim * in.kv_bytes_per_element;
    out.push_back(d);
  }
  return out;
}

}  // namespace

EstimateResult estimate(const EstimateInput& in) {
  const ModelConfig& m = in.model;
  const DeviceSpec& d = in.device;
  const int tp = std::max(1, in.tensor_parallel);
  const int pp = std::max(1, in.pipeline_parallel);
  EstimateResult r;

  r.num_params = llama_num_params(m);
  r.weight_bytes = r.num_params * in.weight_bytes_per_param;
  r.kv_bytes_per_token = 2.0 * m.num_layers * m.num_kv_heads * m.head_dim * in.kv_bytes_per_element;
  r.logits_bytes = 2.0 * std::max(1, in.batch_size) * m.vocab_size * sizeof(float);

  // Each device holds its share of the weights and of every token's KV; the
  // job holds a token only when every device does, so the first to fill
  // decides. The logits buffers are counted on every device (rank 0 holds
  // them, the last stage's tensor ranks the gathered slices).
  r.devices = device_shares(in, tp, pp);
  const double usable = d.memory_bytes * in.memory_utilization;
  r.kv_capacity_tokens = -1;
  for (auto& dev : r.devices) {
    dev.kv_capacity_tokens = std::max(0.0, (usable - dev.weight_bytes - r.logits_bytes) / dev.kv_bytes_per_token);
    r.weight_bytes_per_device = std::max(r.weight_bytes_per_device, dev.weight_bytes);
    r.kv_bytes_per_token_per_device = std::max(r.kv_bytes_per_token_per_device, dev.kv_bytes_per_token);
    r.kv_capacity_tokens =
        r.kv_capacity_tokens < 0 ? dev.kv_capacity_tokens : std::min(r.kv_capacity_tokens, dev.kv_capacity_tokens);
  }
  const double seq_tokens = static_cast<double>(in.prompt_len) + in.output_len;
  r.max_concurrent_seqs = seq_tokens > 0 ? std::floor(r.kv_capacity_tokens / seq_tokens) : 0;

  // The rate that applies to the weights' type: 8-bit types use the 8-bit
  // tensor rate where the device has one; 32-bit weights the FP32 rate.
  double peak = d.peak_flops_16;
  if (in.weight_bytes_per_param >= 4 && d.peak_flops_32 > 0) peak = d.peak_flops_32;
  if (in.weight_bytes_per_param <= 1 && d.peak_flops_8 > 0) peak = d.peak_flops_8;
  // A step passes the stages one after the other: only a stage's tensor
  // ranks work at once.
  const double group_peak = peak * tp;
  const double group_bw = d.bandwidth_bytes_s * tp;
  r.ridge_flops_per_byte = peak / d.bandwidth_bytes_s;

  // Prefill: every prompt token through every weight, causal attention
  // (half the square), weights read once, KV written once.
  const double b = in.batch_size;
  const double p = in.prompt_len;
  r.prefill_flops = b * p * decode_flops_per_token(m, 0) + b * 4.0 * m.num_layers * m.num_heads * m.head_dim * p * p / 2;
  r.prefill_bytes = r.weight_bytes + b * p * r.kv_bytes_per_token;
  r.prefill_time_s = std::max(r.prefill_flops / group_peak, r.prefill_bytes / group_bw);

  // Decode at the mean context of the generation: weights once per step for
  // the whole batch, each sequence's KV once; each stage takes as long as its
  // busiest device, and the stages run in turn.
  const double mean_context = p + in.output_len / 2.0;
  r.decode_flops = b * decode_flops_per_token(m, mean_context);
  r.decode_bytes = r.weight_bytes + b * mean_context * r.kv_bytes_per_token;
  std::vector<double> stage_bytes(static_cast<size_t>(pp), 0.0);
  for (const auto& dev : r.devices) {
    double& s = stage_bytes[static_cast<size_t>(dev.stage)];
    s = std::max(s, dev.weight_bytes + b * mean_context * dev.kv_bytes_per_token);
  }
  double t_mem = 0;
  for (double s : stage_bytes) t_mem += s / d.bandwidth_bytes_s;
  const double t_compute = r.decode_flops / group_peak;
  r.decode_memory_bound = t_mem >= t_compute;

  // Tensor parallelism: two all-reduces per layer (after o_proj and
  // down_proj) and one after the vocabulary-parallel embedding, each of
  // batch x hidden activations; a ring all-reduce sends 2 (tp - 1) / tp of
  // the data from each device. Then the last stage all-gathers the logits
  // slices (f32, vocab / tp columns per rank): (tp - 1) slices per device.
  if (tp > 1) {
    const double msg = b * m.hidden_size * in.activation_bytes;
    const double chunk = std::ceil(static_cast<double>(m.vocab_size) / tp);
    r.tp_comm_bytes_per_step =
        (2.0 * m.num_layers + 1) * (2.0 * (tp - 1) / tp) * msg + (tp - 1) * b * chunk * sizeof(float);
  }
  // Pipeline parallelism adds no collective: each stage boundary sends the
  // batch's hidden states to the next stage, and the last stage sends the
  // logits (f32) back to rank 0.
  if (pp > 1)
    r.pp_comm_bytes_per_step = (pp - 1) * b * m.hidden_size * in.activation_bytes + b * m.vocab_size * sizeof(float);
  if (d.link_bytes_s > 0) {
    r.tp_comm_time_per_step_s = r.tp_comm_bytes_per_step / d.link_bytes_s;
    r.pp_comm_time_per_step_s = r.pp_comm_bytes_per_step / d.link_bytes_s;
  }
  r.decode_step_time_s = std::max(t_mem, t_compute) + r.tp_comm_time_per_step_s + r.pp_comm_time_per_step_s;
  r.decode_tokens_per_s = b / r.decode_step_time_s;
  r.request_latency_s = r.prefill_time_s + in.output_len * r.decode_step_time_s;
  return r;
}

}  // namespace llmk
