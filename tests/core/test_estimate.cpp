#include <catch2/catch.hpp>

#include <cmath>

#include "core/estimate.hpp"

using namespace llmk;

namespace {

// The worked example: d_model 8192, 64 layers, full multi-head attention, a
// gated MLP of 8/3 d (so 12 d^2 weights per layer), fp16.
ModelConfig worked_model() {
  ModelConfig m;
  m.hidden_size = 8192;
  m.num_layers = 64;
  m.num_heads = 64;
  m.num_kv_heads = 64;
  m.head_dim = 128;
  m.intermediate_size = 21845;  // 8/3 x 8192, rounded down
  m.vocab_size = 32000;
  m.tie_word_embeddings = true;
  return m;
}

DeviceSpec a100_at_1_5_tb() {
  DeviceSpec d;
  d.name = "a100-notes";
  d.memory_bytes = 80e9;
  d.bandwidth_bytes_s = 1.5e12;
  d.peak_flops_16 = 312e12;
  return d;
}

}  // namespace

TEST_CASE("fp16 KV of a d_model 8192, 64-layer model is 2 x 2 x 64 x 8192 bytes per token", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  const EstimateResult r = estimate(in);
  CHECK(r.kv_bytes_per_token == 2.0 * 2 * 64 * 8192);
  CHECK(r.kv_bytes_per_token == Approx(2.1e6).epsilon(0.01));
}

TEST_CASE("reading 12 x 2 x 64 x 8192^2 bytes of weights at 1.5 TB/s bounds a decode step at about 69 ms",
          "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.batch_size = 1;
  in.prompt_len = 1;
  in.output_len = 2;
  const EstimateResult r = estimate(in);
  const double notes_bytes = 12.0 * 2 * 64 * 8192.0 * 8192.0;
  CHECK(r.weight_bytes == Approx(notes_bytes).epsilon(0.01));
  CHECK(r.decode_memory_bound);
  CHECK(r.decode_step_time_s == Approx(0.069).epsilon(0.01));
}

TEST_CASE("an A100's 312 TFLOP/s over 1.5 TB/s puts the ridge at about 208 FLOPs per byte", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  CHECK(estimate(in).ridge_flops_per_byte == Approx(208.0));
}

TEST_CASE("decode turns compute-bound once the batch passes the ridge point", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.prompt_len = 1;
  in.output_len = 2;
  in.kv_bytes_per_element = 2;
  in.batch_size = 8;
  CHECK(estimate(in).decode_memory_bound);
  in.batch_size = 512;
  CHECK_FALSE(estimate(in).decode_memory_bound);
}

TEST_CASE("tensor parallelism splits weights and adds all-reduce time", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = *find_device("H100-SXM");
  const EstimateResult one = estimate(in);
  in.tensor_parallel = 4;
  const EstimateResult four = estimate(in);
  CHECK(four.weight_bytes_per_device == Approx(one.weight_bytes / 4));
  CHECK(four.tp_comm_time_per_step_s > 0);
  CHECK(one.tp_comm_time_per_step_s == 0);
  CHECK(four.kv_capacity_tokens > 4 * one.kv_capacity_tokens);
}

TEST_CASE("KV capacity counts what is left after the weights and the logits buffers", "[estimate]") {
  EstimateInput in;
  in.model = worked_model();
  in.device = a100_at_1_5_tb();
  in.device.memory_bytes = 200e9;  // the 103 GB of weights fit, with room for KV
  in.memory_utilization = 1.0;
  in.prompt_len = 1000;
  in.output_len = 1000;
  in.batch_size = 64;
  const EstimateResult r = estimate(in);
  // Two f32 logits buffers of batch x vocab.
  CHECK(r.logits_bytes == Approx(2.0 * in.batch_size * in.model.vocab_size * 4));
  const double expected_tokens = (200e9 - r.weight_bytes - r.logits_bytes) / r.kv_bytes_per_token;
  CHECK(r.kv_capacity_tokens == Approx(expected_tokens));
  CHECK(r.max_concurrent_seqs == std::floor(expected_tokens / 2000));
}

TEST_CASE("every built-in device is found by name and has positive limits", "[estimate]") {
  for (const char* name : {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l40s", "rtx-4090", "a10g"}) {
    auto d = find_device(name);
    REQUIRE(d);
    CHECK(d->bandwidth_bytes_s > 0);
    CHECK(d->peak_flops_16 > 0);
    CHECK(d->memory_bytes > 0);
  }
  CHECK_FALSE(find_device("tpu-v9"));
}
